"""flaxlegacy upgrade: user-written ``flax.optim.OptimizerDef`` subclasses
become optax transformations in the user's own source
(rules/optimizer_defs.py), and the program's Optimizer life cycle a
TrainState with them.

Rule cases run in-process on source strings.  The numeric cases upgrade
tests/upgrade_programs/user_optimizers/prog.py (three definitions with the
structure of SAM's RMSProp, cold posterior's sampler and Shampoo) and run
it with tests/upgrade_programs/optimizers_driver.py: the legacy program
under the compatibility layer, the upgraded one in an environment without
flaxlegacy, from the same initial parameters and data, the upgraded one
also resuming from the checkpoint the legacy program wrote.
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from flaxlegacy.migrate import legacy_optax
from flaxlegacy.migrate import upgraded
from flaxlegacy.upgrade import api
from flaxlegacy.upgrade import upgrade_source
from tests import standalone_env

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAMS = os.path.join(REPO, 'tests', 'upgrade_programs')
TODO = '# TODO(flaxlegacy upgrade): '

HEADER = '''
from flax import nn
from flax import optim
from flax import struct
import jax
import jax.numpy as jnp


class MLP(nn.Module):

  def apply(self, x):
    return nn.Dense(x, 3)


def create_model(key):
  _, params = MLP.init_by_shape(key, [((1, 4), jnp.float32)])
  return nn.Model(MLP, params)


@struct.dataclass
class _HP:
  learning_rate: float
  beta: float


@struct.dataclass
class _State:
  trace: jnp.ndarray
'''

SIGN = '''
class SignMomentum(optim.OptimizerDef):
  """Momentum on the sign of the gradient."""
  unused_flag = True

  def __init__(self, learning_rate=None, beta=0.9):
    """Builds it.

    Args:
      learning_rate: step size.
    """
    super().__init__(_HP(learning_rate, beta))

  def init_param_state(self, param):
    return _State(jnp.zeros_like(param))

  def _direction(self, grad):
    return jnp.sign(grad)

  def apply_param_gradient(self, step, hyper_params, param, state, grad):
    trace = hyper_params.beta * state.trace + self._direction(grad)
    return param - hyper_params.learning_rate * trace, _State(trace)
'''


def up(src):
  return upgrade_source(HEADER + textwrap.dedent(src))


def test_definition_becomes_a_function_returning_optax():
  new, report = up(SIGN + textwrap.dedent('''
      opt = SignMomentum(0.1).create(model)
      '''))
  assert not report.left, report.left
  assert 'class SignMomentum' not in new
  expected = '''
# SignMomentum: upgraded from a flax.optim.OptimizerDef subclass; the same
# methods now build an optax GradientTransformation
# (legacy_optax.from_optimizer_def).
def SignMomentum(learning_rate=None, beta=0.9):
  """Momentum on the sign of the gradient.

  Builds it.

  Args:
    learning_rate: step size.
  """
  unused_flag = True
  hyper_params = _HP(learning_rate, beta)

  def init_param_state(param):
    return _State(jnp.zeros_like(param))

  def _direction(grad):
    return jnp.sign(grad)

  def apply_param_gradient(step, hyper_params, param, state, grad):
    trace = hyper_params.beta * state.trace + _direction(grad)
    return param - hyper_params.learning_rate * trace, _State(trace)

  return legacy_optax.from_optimizer_def(
      hyper_params, init_param_state=init_param_state,
      apply_param_gradient=apply_param_gradient)
'''
  assert expected in new, new
  assert 'from flaxlegacy.migrate import legacy_optax' in new
  assert ('opt = train_state.TrainState.create(apply_fn=MLP().apply, '
          'params=model, tx=SignMomentum(0.1))') in new, new
  again, _ = upgrade_source(new)
  assert again == new


def test_tree_rule_and_optimizer_state_and_imports():
  new, report = upgrade_source(textwrap.dedent('''
      from flax.optim.base import OptimizerDef
      from flax.optim.base import OptimizerState
      import jax


      class Scaled(OptimizerDef):

        def __init__(self, scale):
          self.scale = scale
          super().__init__({'scale': scale})

        def init_state(self, params):
          return OptimizerState(0, jax.tree_map(lambda p: (), params))

        def apply_gradient(self, hyper_params, params, state, grads):
          new = jax.tree_multimap(lambda p, g: p - self.scale * g, params,
                                  grads)
          return new, OptimizerState(state.step + 1, state.param_states)
      '''))
  assert not report.left, report.left
  assert 'class Scaled' not in new and 'from flax.optim' not in new, new
  assert '  scale = scale\n' not in new  # self.scale = scale: the parameter
  assert "  hyper_params = {'scale': scale}\n" in new
  assert ('return legacy_optax.OptimizerState(0, jax.tree_util.tree_map('
          'lambda p: (), params))') in new, new
  assert 'lambda p, g: p - scale * g' in new
  assert ('return legacy_optax.from_optimizer_def(\n      hyper_params, '
          'init_state=init_state,\n      apply_gradient=apply_gradient)'
          ) in new, new


def test_classes_in_the_class_body_move_to_the_top_level():
  """ViT's momentum_clip: the hyper-parameter and state dataclasses live
  in the class body and are reached as ``Optimizer.HyperParams``; a
  constructor argument is replaced by its converted value."""
  new, report = upgrade_source(textwrap.dedent('''
      import flax
      import jax.numpy as jnp


      class Half(flax.optim.OptimizerDef):

        @flax.struct.dataclass
        class HyperParams:
          learning_rate: float

        @flax.struct.dataclass
        class State:
          momentum: jnp.ndarray

        def __init__(self, learning_rate=None, dtype='bfloat16'):
          super().__init__(Half.HyperParams(learning_rate))
          self.dtype = dict(bfloat16=jnp.bfloat16)[dtype]

        def init_param_state(self, param):
          return Half.State(jnp.zeros_like(param, dtype=self.dtype))

        def apply_param_gradient(self, step, hyper_params, param, state,
                                 grad):
          m = state.momentum + grad
          return param - hyper_params.learning_rate * m, Half.State(
              m.astype(self.dtype))
      '''))
  assert not report.left, report.left
  assert '\n@flax.struct.dataclass\nclass HyperParams:\n' in new, new
  assert '\n@flax.struct.dataclass\nclass State:\n' in new
  assert '  dtype = dict(bfloat16=jnp.bfloat16)[dtype]\n' in new
  assert new.endswith('Half.HyperParams = HyperParams\nHalf.State = State\n')
  namespace = {}
  exec(compile(new, '<upgraded>', 'exec'), namespace)  # pylint: disable=exec-used
  tx = namespace['Half'](0.5)
  state = tx.init({"w": namespace["jnp"].ones(2)})
  assert state.param_states["w"].momentum.dtype == namespace["jnp"].bfloat16


# (source after HEADER, why the class stays)
KEPT = [
    ('builtin_subclass', '''
        class MyAdam(optim.Adam):
          pass
        ''', 'MyAdam', 'it derives from optim.Adam, not from OptimizerDef'),
    ('user_subclass', SIGN + textwrap.dedent('''
        class Faster(SignMomentum):

          def _direction(self, grad):
            return 2 * jnp.sign(grad)
        '''), 'SignMomentum', 'Faster derives from it'),
    ('state_on_self', '''
        class Counting(optim.OptimizerDef):

          def init_param_state(self, param):
            return ()

          def apply_param_gradient(self, step, hyper_params, param, state,
                                   grad):
            self.calls = step
            return param - grad, state
        ''', 'Counting', 'apply_param_gradient sets self.calls: state kept on '
        'the definition object'),
    ('hyper_params_changed', '''
        class Decaying(optim.OptimizerDef):

          def init_param_state(self, param):
            return ()

          def apply_param_gradient(self, step, hyper_params, param, state,
                                   grad):
            self.hyper_params = hyper_params.replace(learning_rate=0.5)
            return param - grad, state
        ''', 'Decaying', 'sets self.hyper_params'),
    ('self_passed_on', '''
        class Logged(optim.OptimizerDef):

          def init_param_state(self, param):
            register(self)
            return ()

          def apply_param_gradient(self, step, hyper_params, param, state,
                                   grad):
            return param - grad, state
        ''', 'Logged', 'init_param_state passes self on'),
    ('super_call', '''
        class Clipped(optim.OptimizerDef):

          def init_param_state(self, param):
            return ()

          def apply_param_gradient(self, step, hyper_params, param, state,
                                   grad):
            return param - grad, state

          def apply_gradient(self, hyper_params, params, state, grads):
            grads = jax.tree_map(lambda g: jnp.clip(g, -1, 1), grads)
            return super().apply_gradient(hyper_params, params, state, grads)
        ''', 'Clipped', 'apply_gradient calls super()'),
    ('api_override', '''
        class Fixed(optim.OptimizerDef):

          def init_param_state(self, param):
            return ()

          def apply_param_gradient(self, step, hyper_params, param, state,
                                   grad):
            return param - grad, state

          def update_hyper_params(self, **overrides):
            return self.hyper_params
        ''', 'Fixed', 'it overrides OptimizerDef.update_hyper_params'),
    ('abstract', '''
        class Base(optim.OptimizerDef):

          def init_param_state(self, param):
            return ()
        ''', 'Base', 'it does not define apply_param_gradient'),
    ('property', '''
        class Prop(optim.OptimizerDef):

          @property
          def lr(self):
            return self.hyper_params.learning_rate

          def init_param_state(self, param):
            return ()

          def apply_param_gradient(self, step, hyper_params, param, state,
                                   grad):
            return param - self.lr * grad, state
        ''', 'Prop', 'lr is decorated (property)'),
    ('class_attribute', '''
        class Scaled(optim.OptimizerDef):
          factor = 2.0

          def init_param_state(self, param):
            return ()

          def apply_param_gradient(self, step, hyper_params, param, state,
                                   grad):
            return param - Scaled.factor * grad, state
        ''', 'Scaled', 'apply_param_gradient reads Scaled.factor'),
    ('param_read_after_rebinding', '''
        class Rebind(optim.OptimizerDef):

          def __init__(self, learning_rate, scale):
            self.scale = 2 * scale
            super().__init__(_HP(learning_rate * scale, 0.9))

          def init_param_state(self, param):
            return ()

          def apply_param_gradient(self, step, hyper_params, param, state,
                                   grad):
            return param - self.scale * grad, state
        ''', 'Rebind', '__init__ sets self.scale and reads its own scale'),
    ('name_clash', '''
        def scale(g):
          return 0.5 * g


        class Clash(optim.OptimizerDef):

          def scale(self, g):
            return 2 * g

          def init_param_state(self, param):
            return ()

          def apply_param_gradient(self, step, hyper_params, param, state,
                                   grad):
            return param - scale(grad), state
        ''', 'Clash', 'apply_param_gradient uses the module-level name scale, '
        'which the class also defines'),
    ('inherited_method', '''
        class Init(optim.OptimizerDef):

          def init_param_state(self, param):
            return ()

          def apply_param_gradient(self, step, hyper_params, param, state,
                                   grad):
            fresh = self.init_state(param)
            return param - grad, state
        ''', 'Init', 'calls OptimizerDef.init_state of the base class'),
]


@pytest.mark.parametrize('name,src,cls,why', KEPT, ids=[c[0] for c in KEPT])
def test_not_mechanical_keeps_the_class_with_a_todo(name, src, cls, why):
  del name
  new, report = up(src)
  assert f'class {cls}(' in new, new
  whys = [t['why'] for t in report.left
          if t['why'].startswith(f'{cls} is a user-written optimizer')]
  assert len(whys) == 1 and why in whys[0], (why, whys)
  assert f'{TODO}{cls} is a user-written optimizer definition' in new
  again, _ = upgrade_source(new)
  assert again == new


def test_kept_definition_is_used_through_as_optax():
  new, report = up('''
      class MyAdam(optim.Adam):
        pass

      opt_def = MyAdam(0.1)
      opt = opt_def.create(model)
      ''')
  assert 'tx=opt_def.as_optax())' in new, new
  assert any('MyAdam' in t['why'] for t in report.left)


def test_learning_rate_per_step_injects_the_translated_definition():
  new, report = up(SIGN + textwrap.dedent('''
      opt_def = SignMomentum(beta=0.8)
      opt = opt_def.create(model)
      opt = opt.apply_gradient(g, learning_rate=0.1)
      '''))
  assert not report.left, report.left
  assert ("opt_def = optax.inject_hyperparams(SignMomentum, static_args=("
          "'beta',))(beta=0.8, learning_rate=0.0)") in new, new
  assert 'tx=opt_def)' in new
  assert ("opt.opt_state._replace(hyperparams={**opt.opt_state.hyperparams, "
          "'learning_rate': 0.1})") in new, new


def test_definition_in_another_file(tmp_path):
  src = tmp_path / 'src'
  (src / 'pkg').mkdir(parents=True)
  (src / 'pkg' / '__init__.py').write_text('')
  (src / 'pkg' / 'optim_defs.py').write_text(textwrap.dedent(HEADER + SIGN))
  (src / 'pkg' / 'train.py').write_text(textwrap.dedent('''
      from flax import nn
      from pkg import optim_defs as my_optim
      from pkg.optim_defs import SignMomentum


      def make(model):
        opt_def = my_optim.SignMomentum(learning_rate=0.1)
        return opt_def.create(model), SignMomentum(0.2).create(model)
      '''))
  status, report = api.upgrade_paths([str(src)], out=str(tmp_path / 'out'))
  assert status == 0
  code = (tmp_path / 'out' / 'pkg' / 'train.py').read_text()
  assert 'tx=opt_def)' in code, code
  assert 'tx=SignMomentum(0.2))' in code, code
  assert 'as_optax' not in code
  assert 'def SignMomentum(' in (
      tmp_path / 'out' / 'pkg' / 'optim_defs.py').read_text()
  # the helper copy sits at the package's top, imported as the package is
  assert (tmp_path / 'out' / 'pkg' / 'legacy_helpers.py').exists()
  assert [s['import'] for s in report['shipped']] == ['pkg.legacy_helpers']


def test_from_optimizer_def_is_the_legacy_loop():
  """The helper against the layer's OptimizerDef base class, in-process,
  on a definition whose per-parameter rule uses the step."""
  from flaxlegacy import optim  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top

  def init_param_state(param):
    return {'m': jnp.zeros_like(param)}

  def apply_param_gradient(step, hp, param, state, grad):
    m = 0.5 * state['m'] + grad * (step + 1)
    return param - hp * m, {'m': m}

  class Legacy(optim.OptimizerDef):

    def init_param_state(self, param):
      return init_param_state(param)

    def apply_param_gradient(self, step, hp, param, state, grad):
      return apply_param_gradient(step, hp, param, state, grad)

  params = {'a': jnp.arange(3.), 'b': {'c': jnp.ones((2, 2))}}
  grads = jax.tree_util.tree_map(lambda p: 0.1 * p + 0.3, params)
  opt = Legacy(0.25).create(params)
  tx = legacy_optax.from_optimizer_def(0.25, init_param_state,
                                       apply_param_gradient)
  p, s = params, tx.init(params)
  for _ in range(4):
    opt = opt.apply_gradient(grads)
    u, s = tx.update(grads, s, p)
    p = optax.apply_updates(p, u)
  for a, b in zip(jax.tree_util.tree_leaves(opt.target),
                  jax.tree_util.tree_leaves(p)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert int(s.step) == 4 and int(opt.state.step) == 4
  with pytest.raises(ValueError, match='update\\(\\) needs the params'):
    tx.update(grads, s)


def test_checkpoint_mapping_checks_fields():
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  template = {'step': 0, 'params': {'w': jnp.ones(2)},
              'opt_state': legacy_optax.OptimizerState(
                  jnp.asarray(0), {'w': {'v': jnp.ones(2),
                                         'm': jnp.ones(2)}})}
  raw = {'target': {'w': np.full(2, 3.)},
         'state': {'step': 5, 'param_states': {'w': {'v': np.full(2, 4.),
                                                     'm': np.full(2, 5.)}}}}
  out = upgraded.convert_state_dict(raw, template)
  assert out['step'] == 5 and int(out['opt_state']['step']) == 5
  assert out['opt_state']['param_states']['w']['m'][0] == 5.
  raw['state']['param_states']['w'] = {'v': np.full(2, 4.)}
  with pytest.raises(upgraded.LegacyCheckpointError,
                     match="at /w has fields \\['v'\\], the upgraded "
                     "optimizer \\['m', 'v'\\]"):
    upgraded.convert_state_dict(raw, template)


# --- the upgraded program, numerically ---------------------------------------

NAMES = ['MomentumRMS', 'Langevin', 'Blocks']


def _drive(side, python, env, prog_dir, out, ckpt):
  env = dict(env, PYTHONPATH=prog_dir + env.get('PYTHONPATH', ''))
  run = subprocess.run(
      [python, os.path.join(PROGRAMS, 'optimizers_driver.py'), side,
       str(out), str(ckpt)] + NAMES, cwd=prog_dir, env=env, capture_output=True,
      text=True, timeout=600)
  assert run.returncode == 0, run.stdout + run.stderr[-3000:]
  return dict(np.load(out))


def _compare(tmp_path, python, prog_dir):
  up_dir = tmp_path / 'up'
  status, report = api.upgrade_paths([str(prog_dir)], out=str(up_dir))
  assert status == 0 and report['summary']['todos'] == 0, report['files']
  code = (up_dir / 'prog.py').read_text()
  for name in ('MomentumRMS', 'Langevin', 'BlockPreconditioned'):
    assert f'\ndef {name}(' in code
  legacy_env = {k: v for k, v in os.environ.items() if k != 'FLAXLEGACY'}
  legacy_env.update(JAX_PLATFORMS='cpu')
  legacy_env['PYTHONPATH'] = os.pathsep + REPO
  legacy = _drive('legacy', sys.executable, legacy_env, str(prog_dir),
                  tmp_path / 'legacy.npz', tmp_path / 'ckpt')
  # the layer draws legacy's PRNG stream (jax_threefry_partitionable off);
  # the sampler's noise matches only on the same stream
  upgraded_side = _drive(
      'upgraded', python, standalone_env.env(JAX_THREEFRY_PARTITIONABLE='false'),
      str(up_dir), tmp_path / 'upgraded.npz', tmp_path / 'ckpt')
  for name in NAMES:
    assert upgraded_side.pop(f'{name}/restored_step') == 3
  assert sorted(legacy) == sorted(upgraded_side)
  assert len(legacy) == len(NAMES) * 8
  init = np.load(str(tmp_path / 'init.npz'))
  for k, v in legacy.items():
    # Measured: MomentumRMS and Langevin bit-identical, Blocks within
    # 2e-7 of 1 (eigh and the new-params - params update); 1e-6 of the
    # leaf's largest value leaves room for other CPUs' fusion.
    np.testing.assert_allclose(upgraded_side[k], v, rtol=0,
                               atol=1e-6 * np.abs(v).max(), err_msg=k)
  for name in NAMES:  # not vacuous: every optimizer moved every leaf
    for k, v in init.items():
      assert np.abs(legacy[f'{name}{k}'] - v).max() > 1e-4, (name, k)


@pytest.mark.slow
def test_user_optimizers_train_and_resume_as_legacy(
    tmp_path, python_without_flaxlegacy):
  _compare(tmp_path, python_without_flaxlegacy,
           os.path.join(PROGRAMS, 'user_optimizers'))


@pytest.mark.slow
def test_user_optimizers_with_per_step_learning_rate(
    tmp_path, python_without_flaxlegacy):
  """The same program with ``apply_gradient(grad, learning_rate=lr)``: the
  translated definitions under ``optax.inject_hyperparams``."""
  prog_dir = tmp_path / 'lr'
  prog_dir.mkdir()
  src = open(os.path.join(PROGRAMS, 'user_optimizers', 'prog.py')).read()
  old_sig, old_apply = ('def train_step(optimizer, x, y):',
                        'optimizer.apply_gradient(grad)')
  assert src.count(old_sig) == 1 and src.count(old_apply) == 1
  (prog_dir / 'prog.py').write_text(src.replace(
      old_sig, 'def train_step(optimizer, x, y, lr):').replace(
          old_apply, 'optimizer.apply_gradient(grad, learning_rate=lr)'))
  _compare(tmp_path, python_without_flaxlegacy, str(prog_dir))
  code = (tmp_path / 'up' / 'prog.py').read_text()
  assert ("optax.inject_hyperparams(MomentumRMS, static_args=('beta', "
          "'beta2', 'eps'))(learning_rate=0.05") in code, code
