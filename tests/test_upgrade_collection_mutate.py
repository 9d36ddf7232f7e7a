"""flaxlegacy upgrade: init2winit's virtual batch norm test pattern.

init2winit's ``model_lib/test_normalization.py`` builds models through
``_init(model_cls, rng, shape)`` (``with nn.stateful() as s:`` around
``model_cls.init_by_shape`` and ``nn.Model(model_cls, params)``), where
``model_cls`` is ``nn.BatchNorm.partial(...)`` (a legacy layer) in one
call and the codebase's ``VirtualBatchNorm.partial(...)`` in another;
runs them in ``with nn.stateful(s) as s:`` blocks (the model call an
assignment or a statement of its own) and in ``with nn.stateful(s):``
blocks with no target; syncs the statistics with
``model_utils.sync_local_batch_norm_stats`` (``with s.mutate() as new:``,
``new.as_dict()`` entries updated in place, ``new`` returned); and reads
``s['/']['mean']``.  Before, each of these kept legacy code (four TODOs in
``_init``; the ``mutate`` block either silently left, or, in a codebase
that builds an attention cache, taken for a cache step with a TODO; a
``['/']`` read of a dict of linen collections: KeyError).
"""

import importlib

import jax
import numpy as np

from tests.test_upgrade_port import _run_both
from tests.test_upgrade_port import _upgrade_dir

legacy_model = importlib.import_module('flaxlegacy.migrate.upgraded')

TODO = '# TODO(flaxlegacy upgrade)'

NORMALIZATION = '''\
    import jax.numpy as jnp
    from jax import lax
    from flax import nn
    from jax.nn import initializers


    class VirtualBatchNorm(nn.Module):

      def apply(self, x, batch_stats=None, use_running_average=False,
                momentum=0.99, epsilon=1e-5, virtual_batch_size=None):
        if virtual_batch_size is None or use_running_average:
          virtual_batch_size = x.shape[0]
        n = x.shape[0] // virtual_batch_size
        feat = x.shape[-1]
        x = jnp.reshape(x, (n, virtual_batch_size) + x.shape[1:])
        red = tuple(range(1, x.ndim - 1))
        if self.is_stateful() or batch_stats:
          ra_means = self.state('batch_norm_running_mean', (n, feat),
                                initializers.zeros, collection=batch_stats)
          ra_vars = self.state('batch_norm_running_var', (n, feat),
                               initializers.ones, collection=batch_stats)
        else:
          ra_means = ra_vars = None
        if use_running_average:
          mean = jnp.expand_dims(ra_means.value[0], 0)
          var = jnp.expand_dims(ra_vars.value[0], 0)
        else:
          mean = jnp.mean(x, axis=red)
          var = jnp.mean(lax.square(x), axis=red) - lax.square(mean)
          if ra_means and not self.is_initializing():
            ra_means.value = momentum * ra_means.value + (1 - momentum) * mean
            ra_vars.value = momentum * ra_vars.value + (1 - momentum) * var
        shape = (n,) + (1,) * (x.ndim - 2) + (feat,)
        y = (x - mean.reshape(shape)) * lax.rsqrt(var.reshape(shape) + epsilon)
        y = y * self.param('scale', (feat,), initializers.ones)
        y = y + self.param('bias', (feat,), initializers.zeros)
        return jnp.reshape(y, (-1,) + x.shape[2:])


    class Scale(nn.Module):
      # a second module class: the codebase has no one model class whose
      # fields the model calls could fall back on

      def apply(self, x, factor=2.0):
        return factor * x
    '''

MODEL_UTILS = '''\
    import jax
    from flax import nn  # (the real model_utils uses nn elsewhere)
    import jax.numpy as jnp


    def _sync_helper(x):
      if x.shape[0] == 1:
        return x
      return jnp.tile(jnp.mean(x, axis=0, keepdims=True),
                      [x.shape[0]] + [1] * (x.ndim - 1))


    def sync_local_batch_norm_stats(batch_stats):
      with batch_stats.mutate() as locally_synced_batch_stats:
        for state_values in locally_synced_batch_stats.as_dict().values():
          filtered_values = {
              k: v for k, v in state_values.items()
              if k.startswith('batch_norm_running_')
          }
          state_values.update(jax.tree_map(_sync_helper, filtered_values))
        return locally_synced_batch_stats
    '''

TEST_NORM = '''\
    import json
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nn

    import model_utils
    import normalization


    def _init(model_cls, rng, input_shape):
      with nn.stateful() as init_state:
        _, initial_params = model_cls.init_by_shape(
            rng, [(input_shape, np.float32)])
        model = nn.Model(model_cls, initial_params)
      return model, init_state


    def run():
      rng = jax.random.PRNGKey(0)
      x = jnp.concatenate([jnp.full((4, 3, 5), 2.0), jnp.full((4, 3, 5), 9.0),
                           jnp.arange(8 * 3 * 5.0).reshape(8, 3, 5) / 7.0])
      input_shape = x.shape
      bn_model_cls = nn.BatchNorm.partial(momentum=0.9)
      bn_model, bn_state = _init(bn_model_cls, rng, input_shape)
      vbn_model_cls = normalization.VirtualBatchNorm.partial(
          momentum=0.9, virtual_batch_size=8)
      vbn_model, vbn_state = _init(vbn_model_cls, rng, input_shape)
      with nn.stateful(bn_state) as bn_state:
        bn_y = bn_model(x)
      with nn.stateful(bn_state):
        bn_y2 = bn_model(x)
      with nn.stateful(vbn_state) as vbn_state:
        vbn_y = vbn_model(x)
      with nn.stateful(vbn_state) as vbn_state:
        vbn_model(x)
      vbn_state = model_utils.sync_local_batch_norm_stats(vbn_state)
      with nn.stateful(vbn_state) as vbn_state:
        vbn_y2 = vbn_model(x, use_running_average=True)
      out = {
          'bn_y': float(jnp.sum(bn_y ** 2)), 'bn_y2': float(jnp.sum(bn_y2)),
          'bn_mean': np.asarray(bn_state['/']['mean']).tolist(),
          'bn_var': np.asarray(bn_state['/']['var']).tolist(),
          'vbn_y': float(jnp.sum(vbn_y ** 2)), 'vbn_y2': float(jnp.sum(vbn_y2 ** 2)),
          'vbn_mean': np.asarray(vbn_state['/']['batch_norm_running_mean']).tolist(),
          'vbn_var': np.asarray(vbn_state['/']['batch_norm_running_var']).tolist(),
      }
      return out

    if __name__ == '__main__':
      print(json.dumps(run()))
    '''

FILES = {'normalization.py': NORMALIZATION, 'model_utils.py': MODEL_UTILS,
         'test_norm.py': TEST_NORM}

DRIVE = '''\
    import json
    import test_norm
    print(json.dumps(test_norm.run()))
    '''

# a codebase that also builds a legacy attention cache: its X.mutate()
# blocks were all taken for cache steps
CACHE_FILES = dict(FILES, **{'decode.py': '''\
    from flax import nn


    def cache_def():
      return nn.attention.Cache()
    '''})


def test_collection_dict_entries_write_through():
  m, v = np.zeros(2), np.ones(2)
  state = {'batch_stats': {'mean': m, 'block': {'bn': {'var': v}}}}
  out = legacy_model.collection_dict(state)
  out['/'].update(mean=m + 1)
  out['/block/bn']['var'] = v * 3
  np.testing.assert_array_equal(state['batch_stats']['mean'], m + 1)
  np.testing.assert_array_equal(state['batch_stats']['block']['bn']['var'],
                                v * 3)
  # the entries are a module's own values, and flatten as dicts do (a
  # dict subclass is one leaf to JAX unless registered)
  assert sorted(out['/']) == ['mean']
  assert len(jax.tree_util.tree_leaves(out)) == 2
  doubled = jax.tree_util.tree_map(lambda x: 2 * x, out)
  np.testing.assert_array_equal(doubled['/block/bn']['var'], v * 6)


def test_collection_copy_leaves_the_collection():
  m = np.zeros(2)
  state = {'batch_stats': {'bn': {'mean': m}}}
  with legacy_model.collection_copy(state) as new:
    legacy_model.collection_dict(new)['/bn']['mean'] = m + 5
  assert state['batch_stats']['bn']['mean'] is m
  np.testing.assert_array_equal(new['batch_stats']['bn']['mean'], m + 5)


def test_source(tmp_path):
  _, out, status, _ = _upgrade_dir(tmp_path, FILES)
  assert status == 0
  test = (out / 'test_norm.py').read_text()
  utils = (out / 'model_utils.py').read_text()
  assert TODO not in test + utils, test + utils
  assert 'with legacy_model.stateful() as init_state:' in test
  assert ('legacy_model.init_module_by_shape(model_cls, rng, '
          '[(input_shape, np.float32)])') in test
  assert 'model = initial_params' in test
  assert "x, mutable=['batch_stats'])[0]" in test  # the block with no target
  # a field given at the call of a model a builder made: the constructor's
  assert ("(vbn_model_cls)(use_running_average=True).apply({'params': "
          "vbn_model, **vbn_state}, x, mutable=['batch_stats'])") in test
  # a model call as a statement of its own: the state threaded all the same
  assert ("_, vbn_state = (vbn_model_cls)().apply({'params': vbn_model, "
          "**vbn_state}, x, mutable=['batch_stats'])") in test
  assert "legacy_model.collection_dict(bn_state)['/']['mean']" in test
  assert ('with legacy_model.collection_copy(batch_stats) as '
          'locally_synced_batch_stats:') in utils
  assert 'legacy_model.collection_dict(locally_synced_batch_stats)' in utils


def test_cache_codebase_mutate_of_a_collection_is_no_cache(tmp_path):
  _, out, status, _ = _upgrade_dir(tmp_path, CACHE_FILES)
  assert status == 0
  utils = (out / 'model_utils.py').read_text()
  assert 'cache' not in utils, utils
  assert 'legacy_model.collection_copy(batch_stats)' in utils


def test_numbers_like_legacy(tmp_path):
  legacy, upgraded, _ = _run_both(tmp_path, FILES, DRIVE)
  assert sorted(upgraded) == sorted(legacy)
  # two virtual batches, synced to one mean
  assert np.asarray(legacy['vbn_mean']).shape == (2, 5)
  for k in legacy:
    np.testing.assert_allclose(upgraded[k], legacy[k], rtol=1e-6, atol=1e-6,
                               err_msg=k)
