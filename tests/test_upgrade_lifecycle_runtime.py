"""flaxlegacy upgrade: the legacy life cycle of a module class known only at
run time (rules/lifecycle_runtime.py).

The shape is a model zoo's: a registry of user module classes of different
parameters, a plain wrapper class that builds ``REGISTRY[name].partial(
**hps)`` and keeps it on ``self``, and programs (tests, a trainer) that run
``wrapper.module_def.create(rng, x)`` inside ``nn.stateful()``, call the
model inside ``nn.stateful(state)`` blocks, hand it to functions of other
files, and read ``model.params``.  No ``M(...).apply`` can be written for
it: the create carries the class to run time (``legacy_model.
create_module``) and the ``nn.stateful`` blocks become
``legacy_model.stateful``.  Each program runs twice: the legacy source
under the layer and the upgraded tree with ``FLAXLEGACY=off``; parameters,
state collections and outputs must agree.
"""

import functools
import importlib

import numpy as np
import pytest

from tests import upgrade_run

TODO = '# TODO(flaxlegacy upgrade)'
# (by name: benchmarks/upgrade_same_output.py upgrades tests/ with an older
# flaxlegacy too, which would try to copy helpers it does not have)
legacy_model = importlib.import_module('flaxlegacy.migrate.upgraded')


_upgrade_dir = upgrade_run.upgrade_dir
# the legacy PRNG stream on the upgraded side too, as --verify does
_run = functools.partial(upgrade_run.run_json, legacy_stream=True)


def _close(a, b):
  np.testing.assert_allclose(np.asarray(b, dtype=float),
                             np.asarray(a, dtype=float), rtol=1e-5,
                             atol=1e-6)


ZOO = {
    'zoo/nets.py': '''\
        import jax.numpy as jnp
        from flax import nn


        def waves(key, shape, dtype=jnp.float32):
          # deterministic: legacy and linen derive submodule keys apart
          del key
          n = 1
          for d in shape:
            n *= d
          return (0.5 * jnp.sin(jnp.arange(n) + len(shape))).reshape(
              shape).astype(dtype)


        class Wide(nn.Module):

          def apply(self, x, width, num_outputs, train=True):
            x = nn.relu(nn.Dense(x, width, kernel_init=waves))
            return nn.Dense(x, num_outputs, kernel_init=waves)


        class Normed(nn.Module):

          def apply(self, x, num_outputs, momentum=0.9, train=True):
            x = nn.Dense(x, 5, kernel_init=waves)
            x = nn.BatchNorm(x, use_running_average=not train,
                             momentum=momentum)
            return nn.Dense(nn.relu(x), num_outputs, kernel_init=waves)


        class Zoo(object):
          # a plain wrapper: each kind builds its module definition

          def __init__(self, hps):
            self.hps = hps
            self.module_def = self.build()

          def build(self):
            raise NotImplementedError


        class WideZoo(Zoo):

          def build(self):
            return Wide.partial(width=self.hps['width'], num_outputs=3)


        class NormedZoo(Zoo):

          def build(self):
            return Normed.partial(num_outputs=3,
                                  momentum=self.hps['momentum'])


        REGISTRY = {'wide': WideZoo, 'normed': NormedZoo}
        ''',
    'zoo/train.py': '''\
        import jax
        import jax.numpy as jnp
        from flax import nn


        def loss(model, state, x):
          with nn.stateful(state, mutable=False):
            y = model(x, train=False)
          return jnp.mean(y ** 2)


        def forward(module_def, params, x):
          # nn.base.Model is nn.Model (legacy flax.nn re-exported it)
          return nn.base.Model(module_def, params)(x, train=False)


        def grad_norm(model, state, x):
          g = jax.grad(loss)(model, state, x)
          return sum(jnp.sum(l ** 2) for l in jax.tree_util.tree_leaves(
              g.params))
        ''',
    'zoo/__init__.py': '',
}

PROGRAM = '''
    import json
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nn
    from zoo import nets
    from zoo import train


    def leaves(tree):
      return [np.asarray(l).tolist()
              for l in jax.tree_util.tree_leaves(tree)]


    def run(name):
      zoo = nets.REGISTRY[name]({'width': 6, 'momentum': 0.8})
      rng = jax.random.PRNGKey(0)
      x = jnp.arange(8.).reshape((2, 4)) / 8.
      with nn.stateful() as state:
        _, model = zoo.module_def.create(rng, x)
      with nn.stateful(state) as new_state:
        y = model(x)
      with nn.stateful(new_state, mutable=False):
        y_eval = model(x, train=False)
      with nn.stateful(new_state, mutable=False):
        call = model.module.call(model.params, x, train=False)
      with nn.stateful() as shape_state:
        _, shaped = zoo.module_def.create_by_shape(rng, [(2, 4)], train=False)
      with nn.stateful() as init_state:
        _, params = zoo.module_def.init(rng, x)
      return {'params': leaves(model.params), 'state': leaves(state.as_dict()),
              'new_state': leaves(new_state.as_dict()), 'y': leaves(y),
              'y_eval': leaves(y_eval), 'shaped': leaves(shaped.params),
              'shape_state': leaves(shape_state.as_dict()),
              'init': leaves(params), 'init_state': leaves(init_state.as_dict()),
              'grad_norm': float(train.grad_norm(model, new_state, x)),
              'forward': (leaves(train.forward(zoo.module_def, model.params, x))
                          if name == 'wide' else []),
              'call': leaves(call)}


    print(json.dumps({n: run(n) for n in ('wide', 'normed')}))
    '''


@pytest.fixture(scope='module')
def zoo(tmp_path_factory):
  tmp = tmp_path_factory.mktemp('zoo')
  files = dict(ZOO)
  # (inside the package: the tree gets one copy of the helpers, whose
  # stateful blocks every file of it shares)
  files['zoo/program.py'] = PROGRAM
  src, out, report = _upgrade_dir(tmp, files)
  return src, out, report


def test_run_time_class_upgraded_source(zoo):
  _, out, _ = zoo
  prog = (out / 'zoo' / 'program.py').read_text()
  # the life cycle carried to run time, the blocks at run time, no TODO
  assert ('_, model = legacy_model.create_module(zoo.module_def, rng, x)'
          in prog)
  assert ('legacy_model.create_module_by_shape(zoo.module_def, rng, '
          '[(2, 4)], train=False)') in prog
  assert '_, params = legacy_model.init_module(zoo.module_def, rng, x)' in prog
  assert 'with legacy_model.stateful() as state:' in prog
  # a block whose only statement calls the carried model: the call applies
  # it with the block's collections (legacy_model.apply_model, what the
  # program rules write for carried models); the module's class method call
  # keeps the block at run time
  assert ("y, new_state = legacy_model.apply_model({'params': model, "
          "**state}, x, mutable=['batch_stats'])") in prog
  assert ("y_eval = legacy_model.apply_model({'params': model, "
          "**new_state}, x, train=False)") in prog
  assert 'with legacy_model.stateful(new_state, mutable=False):' in prog
  # other uses of the carried model stay as they are
  assert 'leaves(model.params)' in prog
  # the module's legacy class method call, at run time
  assert ('call = legacy_model.module_call(model.module)(model.params, x, '
          'train=False)') in prog
  assert TODO not in prog
  assert 'nn.stateful' not in prog
  # the library function that receives the carried model: its block too
  lib = (out / 'zoo' / 'train.py').read_text()
  assert ("y = legacy_model.apply_model({'params': model, **state}, x, "
          "train=False)") in lib
  # a model of a class known at run time, made and called in one place
  assert ('return legacy_model.Model(module_def, params)(x, train=False)'
          in lib)
  assert TODO not in lib


@pytest.mark.slow
def test_run_time_class_same_numbers(zoo):
  src, out, _ = zoo
  legacy = _run(src, 'import zoo.program', False)
  upgraded = _run(out, 'import zoo.program', True)
  for name in ('wide', 'normed'):
    a, b = legacy[name], upgraded[name]
    assert set(a) == set(b)
    for key in a:
      if not isinstance(a[key], list):
        _close(a[key], b[key])
        continue
      assert len(a[key]) == len(b[key]), (name, key)
      for x, y in zip(a[key], b[key]):
        _close(x, y)
  # the batch-norm model has state, which its train-mode call changed
  assert upgraded['normed']['state'] and upgraded['normed']['new_state']
  assert upgraded['normed']['state'] != upgraded['normed']['new_state']
  assert not upgraded['wide']['state']
  assert upgraded['wide']['forward'] == upgraded['wide']['y_eval']
  for name in ('wide', 'normed'):
    assert upgraded[name]['call'] == upgraded[name]['y_eval']


def test_stateful_helper_threads_collections():
  """``legacy_model.stateful``: the block's state applied, written back
  when mutable, the given state left as it was."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from flax import linen as nn  # pylint: disable=g-import-not-at-top

  class Count(nn.Module):

    @nn.compact
    def __call__(self, x, train=True):
      c = self.variable('batch_stats', 'n', lambda: jnp.zeros(()))
      if train and not self.is_initializing():
        c.value = c.value + 1.
      return x + c.value

  x = jnp.ones(2)
  with legacy_model.stateful() as state:
    _, model = legacy_model.create_module(Count, jax.random.PRNGKey(0), x)
  assert float(state['batch_stats']['n']) == 0.
  with legacy_model.stateful(state) as new_state:
    y1 = model(x)
    y2 = model(x)
  assert float(state['batch_stats']['n']) == 0.  # the given state kept
  assert float(new_state['batch_stats']['n']) == 2.
  np.testing.assert_allclose(np.asarray(y2), [3., 3.])
  del y1
  with legacy_model.stateful(new_state, mutable=False):
    np.testing.assert_allclose(np.asarray(model(x, train=False)), [3., 3.])
  # a read-only block refuses a write, as legacy did
  with pytest.raises(Exception):
    with legacy_model.stateful(new_state, mutable=False):
      model(x)
  # outside any block the model has no state to read
  with pytest.raises(Exception):
    model(x, train=False)


def test_init_module_by_shape_gives_shapes():
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from flax import linen as nn  # pylint: disable=g-import-not-at-top
  import functools  # pylint: disable=g-import-not-at-top

  class D(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x, scale=1.):
      return nn.Dense(self.features)(x) * scale

  out, model = legacy_model.create_module_by_shape(
      functools.partial(D, features=3), jax.random.PRNGKey(0),
      [((2, 4), jnp.float32)], scale=2.)
  assert out.shape == (2, 3) and not hasattr(out, 'block_until_ready')
  assert model.params['Dense_0']['kernel'].shape == (4, 3)
  # a bare shape is float32, as legacy
  _, params = legacy_model.init_module_by_shape(
      D, jax.random.PRNGKey(0), [(5, 4)], features=2)
  assert params['Dense_0']['kernel'].shape == (4, 2)


def test_one_class_or_unknown_values_not_carried(tmp_path):
  """One class: the program rules' M().apply (no run-time carrying); a
  value the source does not show: the TODO stays."""
  _, out, _ = _upgrade_dir(tmp_path, {
      'nets.py': ZOO['zoo/nets.py'],
      'one.py': '''\
          import jax
          import jax.numpy as jnp
          from flax import nn
          import nets

          def run(x):
            with nn.stateful() as state:
              _, model = nets.Normed.partial(num_outputs=2).create(
                  jax.random.PRNGKey(0), x)
            with nn.stateful(state) as new_state:
              y = model(x)
            return y, new_state
          ''',
      'unknown.py': '''\
          import jax
          from flax import nn

          def run(module_def, x):
            with nn.stateful() as state:
              _, model = module_def.create(jax.random.PRNGKey(0), x)
            return model, state
          ''',
  })
  one = (out / 'one.py').read_text()
  assert 'legacy_model' not in one
  assert '.apply(' in one
  unknown = (out / 'unknown.py').read_text()
  assert 'legacy_model.create_module' not in unknown
  assert TODO in unknown
