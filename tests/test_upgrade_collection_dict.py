"""flaxlegacy upgrade: ``state.as_dict()`` of a legacy ``nn.Collection``
-> ``legacy_model.collection_dict(state)``, legacy's flat layout.

Legacy's ``as_dict()`` keyed a collection by module path
(``{'/block/attn/mean_query': {'tag': v}}``); the upgraded state is a dict
of linen collections, nested (``{'batch_stats': {'block': {'attn':
{'mean_query': {'tag': v}}}}}``).  Code that reads the dict key by key (the
2020 protein language model's train step renames each path and reads
``v['tag']``) needs legacy's layout; before, the call was dropped and that
code got the nested dict (``KeyError: 'tag'``, no TODO).
"""

import importlib

import numpy as np
import pytest

from tests.test_upgrade_port import _run_both
from tests.test_upgrade_port import _upgrade_dir

# (by name: benchmarks/upgrade_same_output.py upgrades tests/ with an older
# flaxlegacy too)
legacy_model = importlib.import_module('flaxlegacy.migrate.upgraded')

TODO = '# TODO(flaxlegacy upgrade)'


def test_collection_dict_layout():
  m, v, t = np.zeros(2), np.ones(2), np.float32(3.)
  state = {'batch_stats': {'root_value': t,
                           'block': {'bn': {'mean': m, 'var': v},
                                     'tag': {'tag': t}}}}
  out = legacy_model.collection_dict(state)
  assert sorted(out) == ['/', '/block/bn', '/block/tag']
  assert out['/'] == {'root_value': t}
  assert out['/block/bn']['mean'] is m and out['/block/bn']['var'] is v
  assert out['/block/tag'] == {'tag': t}
  assert legacy_model.collection_dict({}) == {}
  assert legacy_model.collection_dict(None) == {}
  assert legacy_model.collection_dict({'batch_stats': {}}) == {}


def test_collection_dict_refuses_what_is_not_one_collection():
  with pytest.raises(ValueError, match=r"one linen collection; this state "
                     r"holds \['batch_stats', 'cache'\]"):
    legacy_model.collection_dict({'batch_stats': {'a': {'x': 1}},
                                  'cache': {'b': {'y': 2}}})
  with pytest.raises(TypeError, match='dict of collections, not a list'):
    legacy_model.collection_dict([1, 2])


MODULES = '''\
    import jax.numpy as jnp
    from flax import nn


    def waves(key, shape, dtype=jnp.float32):
      # the same parameters on both sides (legacy and linen split keys
      # otherwise)
      del key
      n = 1
      for d in shape:
        n *= d
      return jnp.sin(jnp.arange(n, dtype=dtype)).reshape(shape)


    class Tag(nn.Module):

      def apply(self, x):
        if self.is_stateful():
          tagged = self.state('tag')
          tagged.value = x
        return x


    class Attention(nn.Module):

      def apply(self, x):
        q = nn.Dense(x, 4, kernel_init=waves, name='query')
        Tag(jnp.mean(q), name='mean_query')
        Tag(jnp.max(q), name='max_query')
        return q


    class Block(nn.Module):

      def apply(self, x, train=True):
        x = Attention(x)
        x = nn.BatchNorm(x, use_running_average=not train, name='bn')
        return nn.relu(x)


    class Net(nn.Module):

      def apply(self, x, train=True):
        x = Block(x, train=train)
        x = Block(x, train=train)
        return nn.Dense(x, 2, kernel_init=waves, name='out')
    '''

TRAIN = '''\
    import jax
    import jax.numpy as jnp
    from flax import nn
    from flax import optim

    import modules


    def create(key, x):
      with nn.stateful() as init_state:
        _, params = modules.Net.init(key, x)
      model = nn.Model(modules.Net, params)
      return optim.GradientDescent(0.1).create(model), init_state


    def train_step(optimizer, state, x):

      def loss_fn(model):
        with nn.stateful(state) as batch_stats:
          y = model(x)
        return jnp.mean(y ** 2), batch_stats

      (loss, batch_stats), grad = jax.value_and_grad(
          loss_fn, has_aux=True)(optimizer.target)
      batch_stats = batch_stats.as_dict()

      def clean_name(k):
        return 'nn/' + k.replace('Attention_', '').replace('/Block_', '')

      metrics = {'loss': loss, 'paths': len(batch_stats)}
      metrics.update({clean_name(k): v['tag'] for k, v in batch_stats.items()
                      if 'tag' in v})
      return optimizer.apply_gradient(grad), metrics
    '''

DRIVE = '''\
    import json
    import jax, jax.numpy as jnp, numpy as np
    import train

    x = jnp.asarray(np.arange(12.0).reshape(3, 4) / 11.0, jnp.float32)
    optimizer, state = train.create(jax.random.PRNGKey(0), x)
    out = []
    for _ in range(2):
      optimizer, metrics = train.train_step(optimizer, state, x)
      out.append({k: float(v) for k, v in metrics.items()})
    print(json.dumps(out))
    '''


def test_as_dict_source(tmp_path):
  _, out, status, _ = _upgrade_dir(tmp_path, {'modules.py': MODULES,
                                              'train.py': TRAIN})
  assert status == 0
  text = (out / 'train.py').read_text()
  assert 'batch_stats = legacy_model.collection_dict(batch_stats)' in text
  assert TODO not in text, text


def test_as_dict_read_key_by_key_like_legacy(tmp_path):
  legacy, upgraded, _ = _run_both(
      tmp_path, {'modules.py': MODULES, 'train.py': TRAIN}, DRIVE)
  # every module that holds state: two blocks' batch norms and four tags
  assert legacy[0]['paths'] == 6
  assert sorted(upgraded[0]) == sorted(legacy[0]) == sorted([
      'loss', 'paths', 'nn/0/0/max_query', 'nn/0/0/mean_query',
      'nn/1/0/max_query', 'nn/1/0/mean_query'])
  for lg, up in zip(legacy, upgraded):
    for k in lg:
      np.testing.assert_allclose(up[k], lg[k], rtol=1e-6, err_msg=k)


NAMED_LAMBDA = '''\
import jax
from flax import nn


def compare(state, new_state, keep):
  shapes = lambda c: jax.tree_util.tree_map(lambda x: x.shape, c.as_dict())
  same = shapes(state) == shapes(new_state)
  passed = lambda d: d.as_dict()
  return same, keep(passed)


def run(model, x, keep):
  with nn.stateful() as init_state:
    model(x)
  with nn.stateful(init_state) as later:
    model(x)
  return compare(init_state, later, keep)
'''


def test_as_dict_in_a_named_lambda_called_with_collections(tmp_path):
  """``shapes = lambda c: ... c.as_dict() ...`` called with collections
  only (the imagenet example's test): ``c`` holds a collection.  A lambda
  handed elsewhere (``keep(passed)``) is called from anywhere: its
  ``as_dict()`` stays."""
  _, out_dir, status, _ = _upgrade_dir(tmp_path, {'prog.py': NAMED_LAMBDA})
  assert status == 0
  out = (out_dir / 'prog.py').read_text()
  assert ('shapes = lambda c: jax.tree_util.tree_map(lambda x: x.shape, '
          'legacy_model.collection_dict(c))') in out, out
  assert 'passed = lambda d: d.as_dict()' in out, out
