"""flaxlegacy upgrade: every legacy optimizer, MultiOptimizer and user-written
optimizer definitions (tests/test_upgrade_user_optimizers.py has the
translated ones).

Rule cases run in-process on source strings.  The numeric cases upgrade the
programs in tests/upgrade_programs/optimizers*/ and run them with
tests/upgrade_programs/optimizers_driver.py: the legacy program under the
compatibility layer, the upgraded one in an environment without flaxlegacy
(tests/standalone_env.py), both from the
same initial parameters and data; the upgraded program also resumes from
the checkpoint the legacy program wrote.
"""

import inspect
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from flaxlegacy.migrate import legacy_optax
from flaxlegacy.upgrade import upgrade_source
from flaxlegacy.upgrade.rules import programs
from tests import standalone_env

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAMS = os.path.join(REPO, 'tests', 'upgrade_programs')

HEADER = '''
from flax import nn
from flax import optim
import jax
import jax.numpy as jnp


class MLP(nn.Module):

  def apply(self, x):
    return nn.Dense(x, 3)


def create_model(key):
  _, params = MLP.init_by_shape(key, [((1, 4), jnp.float32)])
  return nn.Model(MLP, params)

'''


def up(src):
  return upgrade_source(HEADER + textwrap.dedent(src))


CASES = [
    ('lamb', 'opt = optim.LAMB(1e-3, weight_decay=0.01).create(model)\n',
     'tx=legacy_optax.lamb(1e-3, weight_decay=0.01))'),
    ('lars', 'opt = optim.LARS(0.1, 0.9, 1e-4, nesterov=True).create(model)\n',
     'tx=legacy_optax.lars(0.1, beta=0.9, weight_decay=1e-4, '
     'nesterov=True))'),
    ('adagrad', 'opt = optim.Adagrad(learning_rate=0.1).create(model)\n',
     'tx=legacy_optax.adagrad(0.1))'),
    ('adabelief', 'opt = optim.AdaBelief(0.1, eps=1e-12).create(model)\n',
     'tx=legacy_optax.adabelief(0.1, eps=1e-12))'),
    ('adadelta', 'opt = optim.Adadelta(1.0, 0.95).create(model)\n',
     'tx=legacy_optax.adadelta(1.0, rho=0.95))'),
    ('adafactor', 'opt = optim.Adafactor(0.1, beta1=0.9).create(model)\n',
     'tx=legacy_optax.adafactor(0.1, beta1=0.9))'),
    ('rmsprop', 'opt = optim.RMSProp(0.1, beta2=0.8).create(model)\n',
     'tx=optax.rmsprop(0.1, decay=0.8, initial_scale=0.0, '
     'eps_in_sqrt=False))'),
    ('definition_alone', 'tx = optim.LAMB(0.1)\n',
     'tx = legacy_optax.lamb(0.1)'),
]


@pytest.mark.parametrize('name,src,expected', CASES,
                         ids=[c[0] for c in CASES])
def test_optimizer_rule(name, src, expected):
  del name
  new, report = up(src)
  assert expected in new, new
  assert 'from flaxlegacy.migrate import legacy_optax' in new or (
      'legacy_optax' not in expected)
  assert 'from flax import optim' not in new
  assert not report.left, report.left


def test_learning_rate_per_step_injects_only_the_learning_rate():
  new, report = up('''
      opt = optim.LAMB(weight_decay=0.01).create(model)
      opt = opt.apply_gradient(g, learning_rate=0.1)
      ''')
  assert ("tx=optax.inject_hyperparams(legacy_optax.lamb, static_args=("
          "'beta1', 'beta2', 'weight_decay', 'eps'))(learning_rate=0.0, "
          "weight_decay=0.01))") in new, new
  assert ("opt.opt_state._replace(hyperparams={**opt.opt_state.hyperparams, "
          "'learning_rate': 0.1})") in new, new
  assert not report.left, report.left


def test_momentum_with_decay_and_per_step_learning_rate_is_one_state():
  # optax.chain(add_decayed_weights, inject_hyperparams(sgd)) would have no
  # hyperparams to set; legacy_optax.momentum keeps one injectable state
  new, report = up('''
      opt = optim.Momentum(beta=0.8, weight_decay=1e-4).create(model)
      opt = opt.apply_gradient(g, learning_rate=0.1)
      ''')
  assert ("optax.inject_hyperparams(legacy_optax.momentum, static_args=("
          "'beta', 'weight_decay', 'nesterov'))(learning_rate=0.0, beta=0.8, "
          "weight_decay=1e-4)") in new, new
  assert not report.left, report.left


def test_multi_optimizer_becomes_multi_transform():
  new, report = up('''
      kernels = optim.ModelParamTraversal(lambda p, _: 'kernel' in p)
      biases = optim.ModelParamTraversal(lambda p, _: 'bias' in p)
      opt_def = optim.MultiOptimizer((kernels, optim.Momentum(0.1)),
                                     (biases, optim.Adam(0.01)))
      opt = opt_def.create(model)
      ''')
  assert "kernels = lambda p, _: 'kernel' in p" in new, new
  assert ("opt_def = optax.multi_transform({'0': optax.sgd(0.1, "
          "momentum=0.9), '1': optax.adam(0.01), 'frozen': "
          "optax.set_to_zero()}, legacy_optax.traversal_labels(kernels, "
          "biases))") in new, new
  assert 'tx=opt_def)' in new, new
  assert not report.left, report.left


def test_multi_optimizer_with_per_step_hyper_parameters_is_a_todo():
  new, report = up('''
      opt_def = optim.MultiOptimizer(
          (optim.ModelParamTraversal(lambda p, _: True), optim.Adam()))
      opt = opt_def.create(model)
      opt = opt.apply_gradient(g, learning_rate=0.1)
      ''')
  assert 'optim.MultiOptimizer(' in new
  assert '# TODO(flaxlegacy upgrade): optim.MultiOptimizer with ' in new, new
  assert any('MultiOptimizer' in t['why'] for t in report.left)


def test_multi_optimizer_of_an_unknown_pair_is_a_todo():
  new, report = up('''
      opt_def = optim.MultiOptimizer((my_traversal, optim.Adam(0.1)))
      ''')
  assert 'optim.MultiOptimizer((my_traversal' in new, new
  assert any('not a ModelParamTraversal' in t['why'] for t in report.left)


def test_user_optimizer_definition_not_translated_stays_with_as_optax():
  new, report = up('''
      class SignSGD(optim.OptimizerDef):

        def apply_param_gradient(self, step, hp, param, state, grad):
          return param - hp.learning_rate * jnp.sign(grad), state


      class MyAdam(optim.Adam):
        pass


      opt = SignSGD(0.01).create(create_model(None))
      opt_def = MyAdam(0.1)
      opt2 = opt_def.create(model)
      ''')
  assert 'class SignSGD(optim.OptimizerDef):' in new
  assert 'class MyAdam(optim.Adam):' in new
  assert 'tx=SignSGD(0.01).as_optax())' in new, new
  assert 'tx=opt_def.as_optax())' in new, new
  whys = [t['why'] for t in report.left]
  assert any(w.startswith('SignSGD is a user-written optimizer definition')
             for w in whys), whys
  assert any(w.startswith('MyAdam is a user-written optimizer definition')
             for w in whys), whys
  assert new.count('# TODO(flaxlegacy upgrade): SignSGD is a user-written') == 1


def test_idempotent():
  once, _ = up('''
      opt_def = optim.MultiOptimizer(
          (optim.ModelParamTraversal(lambda p, _: True), optim.LAMB(0.1)))
      opt = opt_def.create(model)
      ''')
  twice, _ = upgrade_source(once)
  assert once == twice


# --- legacy_optax ------------------------------------------------------------


@pytest.mark.parametrize('name', sorted(programs.LEGACY_OPTAX))
def test_legacy_optax_takes_the_legacy_constructor_parameters(name):
  from flaxlegacy import optim  # pylint: disable=g-import-not-at-top
  fn, params = programs.LEGACY_OPTAX[name]
  ours = inspect.signature(getattr(legacy_optax, fn)).parameters
  legacy = inspect.signature(getattr(optim, name).__init__).parameters
  assert tuple(ours) == params
  assert [(p.name, p.default) for p in ours.values()] == [
      (p.name, p.default) for p in legacy.values() if p.name != 'self']


def test_legacy_optax_needs_a_learning_rate():
  with pytest.raises(ValueError, match='legacy_optax.lamb: no learning rate '
                     'provided'):
    legacy_optax.lamb()


def test_traversal_labels_follow_legacy_paths_and_reject_overlaps():
  params = {'Dense_0': {'kernel': np.ones(2), 'bias': np.ones(1)},
            'Dense_1': {'kernel': np.ones(2)}}
  labels = legacy_optax.traversal_labels(
      lambda path, _: path.endswith('/kernel'),
      lambda path, _: path == '/Dense_0/bias')(params)
  assert labels == {'Dense_0': {'kernel': '0', 'bias': '1'},
                    'Dense_1': {'kernel': '0'}}
  assert legacy_optax.traversal_labels(
      lambda path, _: 'Dense_1' in path)(params) == {
          'Dense_0': {'kernel': 'frozen', 'bias': 'frozen'},
          'Dense_1': {'kernel': '0'}}
  with pytest.raises(ValueError, match='parameter /Dense_1/kernel is selected '
                     'by the traversals of MultiOptimizer pairs 0, 1'):
    legacy_optax.traversal_labels(lambda p, _: 'Dense_1' in p,
                                  lambda p, _: 'kernel' in p)(params)


def test_legacy_optax_imports_without_the_layer():
  code = ('import sys\n'
          'from flaxlegacy.migrate import legacy_optax\n'
          'legacy_optax.lamb(0.1)\n'
          'import jax\n'
          'assert "flax.nn" not in sys.modules\n'
          'assert "flaxlegacy.optim" not in sys.modules\n'
          'assert jax.config.jax_threefry_partitionable\n'
          'print("ok")\n')
  env = dict(os.environ, FLAXLEGACY='off', JAX_PLATFORMS='cpu',
             PYTHONPATH=REPO)
  run = subprocess.run([sys.executable, '-c', code], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=300)
  assert run.stdout.strip() == 'ok', run.stdout + run.stderr


# --- the upgraded programs, numerically --------------------------------------

ALL = ['Momentum', 'Adam', 'RMSProp', 'Adagrad', 'LAMB', 'LARS', 'AdaBelief',
       'Adadelta', 'Adafactor']


def _drive(side, prog_dir, out, ckpt, names, python=None):
  """The legacy side under the layer; the upgraded side in ``python``, an
  environment without flaxlegacy (tests/standalone_env.py)."""
  env = {k: v for k, v in os.environ.items() if k != 'FLAXLEGACY'}
  env.update(JAX_PLATFORMS='cpu', PYTHONPATH=prog_dir + os.pathsep + REPO)
  if side == 'upgraded':
    env = standalone_env.env(PYTHONPATH=prog_dir)
  run = subprocess.run(
      [python or sys.executable, os.path.join(PROGRAMS,
                                              'optimizers_driver.py'), side,
       str(out), str(ckpt)] + names, cwd=prog_dir, env=env,
      capture_output=True, text=True, timeout=600)
  assert run.returncode == 0, run.stdout + run.stderr[-3000:]
  return dict(np.load(out))


def _compare(tmp_path, program, ckpt, names, python):
  up_dir = tmp_path / 'up'
  run = subprocess.run([sys.executable, '-m', 'flaxlegacy', 'upgrade',
                        os.path.join(PROGRAMS, program), '--out',
                        str(up_dir)], cwd=REPO, capture_output=True,
                       text=True, timeout=300)
  assert run.returncode == 0, run.stdout + run.stderr
  assert ', 0 TODOs' in run.stdout + run.stderr, run.stdout + run.stderr
  ckpt = '-' if ckpt is None else str(tmp_path / 'ckpt')
  legacy = _drive('legacy', os.path.join(PROGRAMS, program),
                  tmp_path / 'legacy.npz', ckpt, names)
  upgraded = _drive('upgraded', str(up_dir), tmp_path / 'upgraded.npz', ckpt,
                    names, python)
  for name in names:
    if ckpt != '-':
      assert upgraded.pop(f'{name}/restored_step') == 3
  assert sorted(legacy) == sorted(upgraded)
  assert len(legacy) == len(names) * (8 if ckpt != '-' else 4)
  init = np.load(str(tmp_path / 'init.npz'))
  for k, v in legacy.items():
    # Measured: bit-identical on the development machine (same optax ops
    # on both sides); 1e-6 of the leaf's largest value leaves room for a
    # different fusion order elsewhere.
    np.testing.assert_allclose(upgraded[k], v, rtol=0,
                               atol=1e-6 * np.abs(v).max(), err_msg=k)
  return legacy, init


@pytest.mark.slow
def test_upgraded_optimizers_train_and_resume_as_legacy(
    tmp_path, python_without_flaxlegacy):
  legacy, init = _compare(tmp_path, 'optimizers', True, ALL,
                          python_without_flaxlegacy)
  for name in ALL:  # the comparison is not vacuous: every optimizer moved
    moved = max(np.abs(legacy[f'{name}{k}'] - v).max()
                for k, v in init.items())
    assert moved > 1e-4, name


@pytest.mark.slow
def test_upgraded_multi_optimizer_trains_as_legacy(
    tmp_path, python_without_flaxlegacy):
  legacy, init = _compare(tmp_path, 'optimizers', None, ['Multi'],
                          python_without_flaxlegacy)
  # kernels: Momentum, the second layer's bias: Adam, the first one's:
  # no traversal selects it, it stays
  assert np.abs(legacy["Multi['Dense_0']['kernel']"]
                - init["['Dense_0']['kernel']"]).max() > 1e-4
  assert np.abs(legacy["Multi['Dense_1']['bias']"]
                - init["['Dense_1']['bias']"]).max() > 1e-4
  np.testing.assert_array_equal(legacy["Multi['Dense_0']['bias']"],
                                init["['Dense_0']['bias']"])


@pytest.mark.slow
def test_upgraded_per_step_learning_rates_train_as_legacy(
    tmp_path, python_without_flaxlegacy):
  _compare(tmp_path, 'optimizers_lr', None,
           ['Momentum', 'MomentumDecay', 'LAMB', 'Adagrad', 'Adafactor'],
           python_without_flaxlegacy)


# --- jax.experimental.optimizers beside Flax ------------------------------------

JEO_CASES = [
    ('from_module', 'from jax.experimental import optimizers\n',
     'from jax.example_libraries import optimizers\n'),
    ('from_module_and_stax',
     'from jax.experimental import optimizers, stax\n',
     'from jax.example_libraries import optimizers, stax\n'),
    ('from_names',
     'from jax.experimental.optimizers import clip_grads, l2_norm\n',
     'from jax.example_libraries.optimizers import clip_grads, l2_norm\n'),
    ('import_as', 'import jax.experimental.optimizers as jopt\n',
     'import jax.example_libraries.optimizers as jopt\n'),
    ('import_spelled_out',
     'import jax\nimport jax.experimental.optimizers\n'
     'n = jax.experimental.optimizers.l2_norm(g)\n',
     'import jax\nimport jax.example_libraries.optimizers\n'
     'n = jax.example_libraries.optimizers.l2_norm(g)\n'),
]


@pytest.mark.parametrize('name,src,expected', JEO_CASES,
                         ids=[c[0] for c in JEO_CASES])
def test_jax_experimental_optimizers_get_their_new_path(name, src, expected):
  del name
  new, report = upgrade_source(src)
  assert new == expected
  assert not report.left


def test_jax_experimental_optimizer_helpers_compute_as_before():
  """clip_grads, l2_norm and the schedules beside a Flax program, upgraded,
  run on today's JAX with the values of their definitions."""
  new, report = upgrade_source(textwrap.dedent('''
      import jax
      import jax.numpy as jnp
      from jax.experimental import optimizers
      from jax.experimental.optimizers import clip_grads


      def values(grads, step):
        return (clip_grads(grads, 1.0), optimizers.l2_norm(grads),
                optimizers.exponential_decay(0.1, 10, 0.5)(step),
                optimizers.piecewise_constant([2, 4], [1., .5, .1])(step),
                optimizers.inverse_time_decay(1., 2, 0.5)(step))
      '''))
  assert 'jax.experimental' not in new and not report.left
  namespace = {}
  exec(compile(new, '<upgraded>', 'exec'), namespace)  # pylint: disable=exec-used
  grads = {'a': np.array([3., 4.]), 'b': np.array([12.])}
  clipped, norm, decay, piece, inverse = namespace['values'](grads, 5)
  np.testing.assert_allclose(float(norm), 13., rtol=1e-6)
  np.testing.assert_allclose(np.asarray(clipped['a']), [3 / 13, 4 / 13],
                             rtol=1e-6)
  np.testing.assert_allclose(float(decay), 0.1 * 0.5 ** 0.5, rtol=1e-6)
  assert float(piece) == np.float32(0.1)
  np.testing.assert_allclose(float(inverse), 1 / (1 + 0.5 * 5 / 2),
                             rtol=1e-6)
