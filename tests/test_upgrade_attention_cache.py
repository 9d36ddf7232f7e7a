"""flaxlegacy upgrade: the legacy attention cache life cycle
(rules/attention_cache.py) -> linen's ``'cache'`` collection.

The shape every 2020 autoregressive decoder had (flax's lm1b / wmt
examples and the codebases built from them): ``Cache().mutate()`` around
the init, ``cache_def.initialize_cache(shape)``, ``cache.mutate()`` around
each decoding step (in a Python loop and in a ``fori_loop`` carrying the
cache), attention layers given ``cache=cache``, and a positional-embedding
module that keeps its own entry with ``cache.store`` / ``cache.retrieve``.
The upgraded program runs with ``FLAXLEGACY=off`` and decodes the same
tokens with the same logits as the legacy one under the layer (both sides
with the same parameters: the trees keep legacy structure, so one
deterministic fill of the flattened tree gives both the same values).
"""

import textwrap

import numpy as np
import pytest

from flaxlegacy.migrate import upgraded_cache
from flaxlegacy.upgrade import upgrade_source
from tests.test_upgrade_port import _run_both
from tests.test_upgrade_port import _upgrade_dir

TODO = '# TODO(flaxlegacy upgrade)'

MODELS = '''\
    import numpy as np
    import jax.numpy as jnp
    from jax import lax
    from flax import nn


    class AddPositions(nn.Module):

      def apply(self, inputs, max_len=8, cache=None):
        pos = self.param('pos', (1, max_len, inputs.shape[-1]),
                         nn.initializers.normal(stddev=1.0))
        pe = pos[:, :inputs.shape[1], :]
        if cache:
          if self.is_initializing():
            cache.store(np.array((4, 1, 1), dtype=np.int32))
          else:
            entry = cache.retrieve(None)
            i = entry.i
            entry = entry.replace(i=entry.i + jnp.array(1, jnp.uint32))
            cache.store(entry)
            pe = lax.dynamic_slice(pos, jnp.array((0, i, 0)),
                                   jnp.array((1, 1, pos.shape[-1])))
        return inputs + pe


    class Block(nn.Module):

      def apply(self, x, num_heads, cache=None):
        y = nn.LayerNorm(x)
        y = nn.SelfAttention(y, num_heads=num_heads, causal_mask=True,
                             cache=cache)
        x = x + y
        return x + nn.Dense(nn.LayerNorm(x), x.shape[-1])


    class TinyLM(nn.Module):

      def apply(self, tokens, vocab=7, emb=8, num_layers=2, cache=None):
        x = nn.Embed(tokens.astype('int32'), vocab, emb, name='embed')
        x = AddPositions(x, cache=cache)
        for _ in range(num_layers):
          x = Block(x, num_heads=2, cache=cache)
        return nn.Dense(x, vocab)
    '''

LM = '''\
    import functools

    import jax
    import jax.numpy as jnp
    from flax import nn

    import models


    @functools.partial(jax.jit, static_argnums=(1,))
    def create_model_and_cache(rng, input_shape):
      with nn.attention.Cache().mutate() as cache_def:
        _, model = models.TinyLM.create_by_shape(
            rng, [(input_shape, jnp.float32)], cache=cache_def)
      return model, cache_def


    def greedy(seed, batch, length, transform):
      model, cache_def = create_model_and_cache(jax.random.PRNGKey(seed),
                                                (batch, length))
      model = transform(model)
      cache = cache_def.initialize_cache((batch, length))

      @jax.jit
      def step(token, cache):
        with cache.mutate() as new_cache:
          logits = model(token, cache=new_cache)
        return logits[:, -1], new_cache

      first = (jnp.arange(batch) % 7)[:, None].astype(jnp.int32)
      token = first
      tokens, all_logits = [], []
      for _ in range(length):
        logits, cache = step(token, cache)
        token = jnp.argmax(logits, -1)[:, None].astype(jnp.int32)
        tokens.append(token)
        all_logits.append(logits)
      full = model(jnp.concatenate([first] + tokens[:-1], 1))

      def body(i, state):
        token, cache, out = state
        with cache.mutate() as new_cache:
          logits = model(token, cache=new_cache)
        token = jnp.argmax(logits[:, -1], -1)[:, None].astype(jnp.int32)
        return token, new_cache, out.at[:, i].set(token[:, 0])

      init = (first, cache_def.initialize_cache((batch, length)),
              jnp.zeros((batch, length), jnp.int32))
      _, _, looped = jax.lax.fori_loop(0, length, body, init)
      return jnp.concatenate(tokens, 1), jnp.stack(all_logits, 1), full, looped
    '''

# The same parameters on both sides: legacy's tree and the upgraded one
# have the same structure, so their flattened leaves line up.
DRIVE = '''\
    import json, os
    import jax, jax.numpy as jnp, numpy as np
    import lm

    def fill(params):
      leaves, tree = jax.tree_util.tree_flatten(params)
      new = [jnp.asarray(np.random.RandomState(k).normal(size=x.shape),
                         jnp.float32) for k, x in enumerate(leaves)]
      return jax.tree_util.tree_unflatten(tree, new)

    if os.environ.get('FLAXLEGACY') == 'off':
      transform = fill
    else:
      transform = lambda m: m.replace(params=fill(m.params))
    tokens, logits, full, looped = lm.greedy(0, 3, 6, transform)
    print(json.dumps({'tokens': np.asarray(tokens).tolist(),
                      'looped': np.asarray(looped).tolist(),
                      'logits': np.asarray(logits).tolist(),
                      'full': np.asarray(full).tolist()}))
    '''

FILES = {'models.py': MODELS, 'lm.py': LM}


def test_cache_life_cycle_source(tmp_path):
  _, out, status, report = _upgrade_dir(tmp_path, FILES)
  assert status == 0
  lm = (out / 'lm.py').read_text()
  models = (out / 'models.py').read_text()
  assert TODO not in lm and TODO not in models, (lm, models)
  # 1. the init block: the 'cache' collection of linen's init
  assert 'Cache' not in lm and '.mutate()' not in lm
  assert ("_variables = models.TinyLM(cache=True).init(rng, "
          "jnp.ones(input_shape, jnp.float32))") in lm
  assert "model = _variables['params']" in lm
  assert ("cache_def = {k: v for k, v in _variables.items() "
          "if k == 'cache'}") in lm
  # 2. initialize_cache
  assert 'legacy_initialize_cache(cache_def, (batch, length))' in lm
  # 3. each step threads the collection (twice: the loop and fori_loop)
  assert lm.count("logits, new_cache = models.TinyLM(cache=True).apply("
                  "{'params': model, **cache}, token, mutable=['cache'])"
                  ) == 2
  # 4. the module's own entry; attention decodes where cache is given
  assert 'legacy_cache_store(self, np.array((4, 1, 1), dtype=np.int32))' in (
      models)
  assert 'entry = legacy_cache_retrieve(self, None)' in models
  assert 'legacy_cache_store(self, entry)' in models
  assert 'decode=self.cache is not None' in models
  # slice sizes as an array: today's JAX wants the tuple
  assert 'jnp.array((0, i, 0)),\n' in models
  assert '(1, 1, pos.shape[-1]))' in models
  helpers = (out / 'legacy_helpers.py').read_text()
  for name in ('legacy_initialize_cache', 'legacy_cache_store',
               'legacy_cache_retrieve', 'class LegacyCacheEntry'):
    assert name in helpers


@pytest.mark.slow
def test_greedy_decode_matches_legacy(tmp_path):
  """Tokens equal; logits within 1e-4 + 1e-5 relative (float32 with N(0, 1)
  parameters: each side's step-by-step logits differ from its own full pass
  by ~3e-5, measured)."""
  legacy, upgraded, _ = _run_both(tmp_path, FILES, DRIVE)
  assert upgraded['tokens'] == legacy['tokens']
  assert upgraded['looped'] == legacy['looped'] == legacy['tokens']
  # not one token repeated: the positions and the cache matter
  assert len({t for row in legacy['tokens'] for t in row}) > 1
  np.testing.assert_allclose(upgraded['logits'], legacy['logits'],
                             rtol=1e-5, atol=1e-4)
  np.testing.assert_allclose(upgraded['full'], legacy['full'],
                             rtol=1e-5, atol=1e-4)
  # the decoding is the full pass, step by step
  full = np.asarray(upgraded['full'])
  np.testing.assert_allclose(upgraded['logits'], full, rtol=1e-5, atol=1e-4)


def test_cache_block_without_model_call_keeps_a_todo(tmp_path):
  lm = LM.replace('''\
        with cache.mutate() as new_cache:
          logits = model(token, cache=new_cache)
        return logits[:, -1], new_cache''', '''\
        with cache.mutate() as new_cache:
          logits = helper(model, token, new_cache)
        return logits[:, -1], new_cache''')
  _, out, status, _ = _upgrade_dir(tmp_path, {'models.py': MODELS,
                                              'lm.py': lm})
  assert status == 0
  text = (out / 'lm.py').read_text()
  assert (f'{TODO}: X.mutate() block, taken for a legacy attention cache '
          '(the codebase builds one, and X is not known to hold an '
          'nn.Collection): no model call or init inside') in text
  assert 'with cache.mutate() as new_cache:' in text


def test_codebase_with_its_own_collection_keeps_the_todos(tmp_path):
  """A codebase that builds an nn.Collection of its own: a parameter's
  store / retrieve may be that collection's, not the cache's."""
  lm = LM + textwrap.dedent('''\


      def record(model, x):
        with nn.Collection().mutate() as coll:
          model(x, cache=coll)
        return coll
      ''')
  _, out, status, _ = _upgrade_dir(tmp_path, {'models.py': MODELS,
                                              'lm.py': lm})
  assert status == 0
  models = (out / 'models.py').read_text()
  assert "is a legacy nn.Collection argument" in models
  assert 'legacy_cache_store' not in models
  assert 'legacy attention cache -> linen decode' in models
  text = (out / 'lm.py').read_text()
  assert 'legacy_initialize_cache' not in text


def test_initialize_cache_shapes():
  """legacy: zeros of shape + tail per entry, i a uint32 zero; linen's own
  attention variables the same way (cache_index a scalar)."""
  entry = upgraded_cache._entry_of_shape(np.array((4, 1, 1), np.int32))  # pylint: disable=protected-access
  cache = {'cache': {
      'pos': {'cache_entry': entry},
      'attn': {'cached_key': np.ones((2, 5, 3, 4), np.float32),
               'cached_value': np.ones((2, 5, 3, 4), np.float32),
               'cache_index': np.array(3, np.int32)}}}
  out = upgraded_cache.legacy_initialize_cache(cache, (6, 9))
  pos = out['cache']['pos']['cache_entry']
  assert isinstance(pos, upgraded_cache.LegacyCacheEntry)
  assert pos.key.shape == pos.value.shape == (6, 9, 1, 1)
  assert pos.i.shape == () and pos.i.dtype == np.uint32
  attn = out['cache']['attn']
  assert attn['cached_key'].shape == (6, 9, 3, 4)
  assert not np.any(attn['cached_key']) and not np.any(attn['cached_value'])
  assert attn['cache_index'].dtype == np.int32 and int(attn['cache_index']) == 0
  half = upgraded_cache.legacy_initialize_cache(cache, (6, 9), np.float16)
  assert half['cache']['attn']['cached_key'].dtype == np.float16
  assert half['cache']['attn']['cache_index'].dtype == np.int32
  with pytest.raises(ValueError, match='fewer axes'):
    upgraded_cache.legacy_initialize_cache(cache, (1, 2, 3, 4, 5))
  with pytest.raises(ValueError, match='integer array'):
    upgraded_cache._entry_of_shape(np.array([1.5]))  # pylint: disable=protected-access


def test_dynamic_slice_sizes_array_becomes_the_tuple():
  out, _ = upgrade_source(textwrap.dedent('''\
      import jax.numpy as jnp
      from jax import lax


      def f(x, i, d):
        a = lax.dynamic_slice(x, jnp.array((0, i)), jnp.array((1, d)))
        b = lax.dynamic_slice(x, (0, i), slice_sizes=jnp.array([2]))
        c = lax.dynamic_slice(x, (0, i), sizes)
        return a, b, c
      '''))
  assert 'lax.dynamic_slice(x, jnp.array((0, i)), (1, d))' in out
  assert 'lax.dynamic_slice(x, (0, i), slice_sizes=(2,))' in out
  assert 'lax.dynamic_slice(x, (0, i), sizes)' in out
