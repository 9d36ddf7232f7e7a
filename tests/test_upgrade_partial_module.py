"""flaxlegacy upgrade: ``X.partial(**kwargs)`` where X holds module classes
of different parameters (a registry of models), split at run time
(``legacy_model.partial_module``, rules/modules.py ``_classes_partial``).

A model factory of 2020 research code::

    MODELS = {'cnn': CNN, 'fc': FC}
    def create_model(name, rng, input_specs, **kwargs):
      with nn.stateful() as init_state:
        with nn.stochastic(rng):
          model_class = MODELS[name].partial(**kwargs)
          _, params = model_class.init_by_shape(rng, input_specs)
      return nn.Model(model_class, params), init_state

Which keywords are fields and which are call arguments depends on the class
picked at run time; legacy ``.partial`` bound both.  The upgraded code runs
with FLAXLEGACY=off and must give the legacy numbers.
"""

import importlib

import numpy as np

from tests import upgrade_run

legacy_model = importlib.import_module('flaxlegacy.migrate.upgraded')

FACTORY = {
    'models.py': '''\
        import jax.numpy as jnp
        from flax import nn


        def waves(key, shape, dtype=jnp.float32):
          # deterministic: legacy and linen derive submodule keys apart
          del key
          n = 1
          for d in shape:
            n *= d
          return jnp.cos(jnp.arange(n, dtype=dtype)).reshape(shape)


        class Wide(nn.Module):

          def apply(self, x, features=3, scale=1.0, train=True):
            y = nn.Dense(x, features, kernel_init=waves, name='dense')
            return y * scale if train else y * 2. * scale


        class Deep(nn.Module):

          def apply(self, x, depth=2, train=True):
            for i in range(depth):
              x = nn.Dense(x, 2, kernel_init=waves, name=f'dense_{i}')
            return x if train else -x
        ''',
    'factory.py': '''\
        from flax import nn

        import models

        MODELS = {'wide': models.Wide, 'deep': models.Deep}


        def create_model(name, rng, input_specs, **kwargs):
          if name not in MODELS:
            raise ValueError('No such model: {}'.format(name))
          with nn.stateful() as init_state:
            with nn.stochastic(rng):
              model_class = MODELS[name].partial(**kwargs)
              _, params = model_class.init_by_shape(rng, input_specs)
          return nn.Model(model_class, params), init_state
        ''',
}

RUN = '''\
    import json
    import jax, jax.numpy as jnp
    import factory
    x = jnp.arange(8.).reshape((2, 4)) / 8.
    out = {}
    for name, kw in (('wide', dict(features=5, scale=3., train=False)),
                     ('deep', dict(depth=3, train=False))):
      model, state = factory.create_model(
          name, jax.random.PRNGKey(0), [((2, 4), jnp.float32)], **kw)
      leaves = jax.tree_util.tree_leaves(model.params)
      out[name] = {'params': [l.tolist() for l in leaves],
                   # the partial's call argument (train=False), then the
                   # call's own overriding it
                   'y': model(x).tolist(), 'y_train': model(x, train=True).tolist()}
    print(json.dumps(out))
    '''


def test_registry_partial_becomes_partial_module(tmp_path):
  _, out_dir, _ = upgrade_run.upgrade_dir(tmp_path, FACTORY)
  out = (out_dir / 'factory.py').read_text()
  assert 'model_class = partial_module(MODELS[name], **kwargs)' in out, out
  assert 'TODO' not in out.split('def create_model')[1], out


def test_registry_partial_numbers_match_legacy(tmp_path):
  src, out, report = upgrade_run.upgrade_dir(tmp_path, FACTORY)
  assert not report['files']['factory.py']['left'], report['files']
  legacy = upgrade_run.run_json(src, RUN, off=False)
  upgraded = upgrade_run.run_json(out, RUN, off=True, legacy_stream=True)
  for name in ('wide', 'deep'):
    for key in ('params', 'y', 'y_train'):
      for a, b in zip(legacy[name][key], upgraded[name][key]):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-6,
                                   atol=1e-7)
  # the call argument the partial bound took effect, and the call's own won
  assert not np.allclose(legacy['wide']['y'], legacy['wide']['y_train'])


def test_partial_module_splits_by_the_class_at_run_time():
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from flax import linen as nn  # pylint: disable=g-import-not-at-top

  class Scaled(nn.Module):
    features: int = 2

    @nn.compact
    def __call__(self, x, scale=1.0):
      return nn.Dense(self.features)(x) * scale

  p = legacy_model.partial_module(Scaled, features=4, scale=3.)
  assert p.keywords == {'features': 4} and p.call_kwargs == {'scale': 3.}
  # a partial of the partial keeps both, the newer keywords winning
  q = legacy_model.partial_module(p, scale=5.)
  assert q.keywords == {} and q.call_kwargs == {'scale': 5.}
  assert q().features == 4
  x = jnp.ones((1, 3))
  _, params = legacy_model.init_module(q, jax.random.PRNGKey(0), x)
  y = legacy_model.Model(q, params)(x)
  ref = Scaled(features=4).apply({'params': params}, x, scale=5.)
  np.testing.assert_allclose(np.asarray(y), np.asarray(ref), rtol=1e-6)


def test_partial_of_a_layer_partial_outside_module_bodies():
  """``.partial`` of a local that holds a legacy layer or a partial of one
  (a conv chosen by configuration) becomes functools.partial; it used to
  stop the whole file with an AttributeError (a layer has no catch-all
  keyword)."""
  from flaxlegacy.upgrade import api  # pylint: disable=g-import-not-at-top
  code, report = api.upgrade_source(
      'from flax import nn\n\n'
      'def get_conv(kind, pad):\n'
      '  if kind == "a":\n'
      '    conv = nn.Conv\n'
      '  else:\n'
      '    conv = nn.Conv.partial(bias=False)\n'
      '  conv = conv.partial(padding=pad)\n'
      '  return conv\n', 'm.py')
  assert 'conv = functools.partial(conv, padding=pad)' in code, code
  assert 'functools.partial(nn.Conv, use_bias=False)' in code, code
  assert not report.failed
