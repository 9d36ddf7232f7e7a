"""flaxlegacy upgrade: legacy attention (nn.SelfAttention,
nn.MultiHeadDotProductAttention, their masks and cache) -> linen
MultiHeadDotProductAttention with ``legacy_attention_mask``; a local holding
``X.partial(...)`` or a module from outside (wmt's embedding) -> a linen
instance.  Upgraded code runs with FLAXLEGACY=off (flaxlegacy.upgrade.verify
and the decoding check's own subprocess)."""

import json
import os
import pickle
import subprocess
import sys
import textwrap

import jax.numpy as jnp
import numpy as np
import pytest

from flaxlegacy.migrate import upgraded_attention
from flaxlegacy.upgrade import upgrade_source
from flaxlegacy.upgrade import verify

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TODO = 'TODO(flaxlegacy upgrade)'


def up(src):
  return upgrade_source(textwrap.dedent(src))


BLOCK = '''
    from flax import nn

    class Block(nn.Module):
      def apply(self, inputs, num_heads, padding_mask=None, cache=None,
                deterministic=False):
        x = nn.LayerNorm(inputs)
        x = nn.SelfAttention(
            x,
            num_heads=num_heads,
            causal_mask=True,
            padding_mask=padding_mask,
            bias=False,
            dropout_rate=0.1,
            deterministic=deterministic,
            cache=cache)
        return x + inputs
    '''


def test_self_attention_source():
  out, report = up(BLOCK)
  assert textwrap.dedent('''\
        x = nn.MultiHeadDotProductAttention(
            num_heads=self.num_heads,
            use_bias=False,
            dropout_rate=0.1,
            deterministic=self.deterministic,
            decode=self.cache is not None, name='MultiHeadDotProductAttention_1')(x, mask=legacy_attention_mask(
            x,
            causal_mask=True,
            padding_mask=padding_mask,
            decode=self.cache is not None))
  ''') in textwrap.dedent(out.split('nn.LayerNorm()(inputs)\n')[1]), out
  # the mask is an array: a __call__ parameter, not a field
  assert 'def __call__(self, inputs, padding_mask=None):' in out
  assert ('from flaxlegacy.migrate.upgraded_attention import '
          'legacy_attention_mask') in out
  assert 'SelfAttention' not in out and 'flax.nn' not in out
  # the cache is linen's 'cache' collection: the call says so
  assert f"{TODO}: legacy attention cache -> linen decode" in out
  assert any(r['rule'] == 'attention' for r in report.rewritten)
  # a tree upgrade copies exactly this helper into the tree (shipping.py)
  from flaxlegacy.upgrade import shipping  # pylint: disable=g-import-not-at-top
  assert shipping.names_of(shipping.uses(out)) == {'legacy_attention_mask'}
  # idempotent
  again, _ = upgrade_source(out)
  assert again == out


def test_cross_attention_positional_arguments():
  out, _ = up('''
      from flax import nn

      class Cross(nn.Module):
        def apply(self, x, kv, seg, kv_seg):
          return nn.MultiHeadDotProductAttention(
              x, kv, 2, jnp.float32, 4, segmentation=seg,
              key_segmentation=kv_seg, dropout_rng=None, name='att')
      ''')
  assert "nn.MultiHeadDotProductAttention(\n" in out
  flat = ' '.join(out.split())
  assert ("nn.MultiHeadDotProductAttention( num_heads=2, dtype=jnp.float32, "
          "qkv_features=4, name='att')(x, kv, mask=legacy_attention_mask( x, "
          "kv, segmentation=seg, key_segmentation=kv_seg), dropout_rng=None)"
          in flat), out
  assert 'def __call__(self, x, kv, seg, kv_seg):' in out
  assert TODO not in out


@pytest.mark.parametrize('call,why', [
    ('nn.SelfAttention(nn.LayerNorm(x), num_heads=2)',
     'the inputs must be plain variables'),
    ('nn.SelfAttention(x, 2)', 'more positional arguments than legacy'),
    ('nn.SelfAttention(x, **kw, **kw)', 'with *args / several **kwargs'),
    ('nn.attention.SelfAttention(x, num_heads=2, cache=c, foo=1)',
     "unknown argument 'foo'"),
], ids=['expression_input', 'positional', 'kwargs', 'unknown'])
def test_unsure_attention_keeps_a_todo(call, why):
  out, report = up(f'''
      from flax import nn

      class M(nn.Module):
        def apply(self, x, f=None, c=None, kw=None):
          return {call}
      ''')
  todo = [l for l in out.splitlines() if TODO in l]
  assert any(why in l for l in todo), out
  assert any(why in item['why'] for item in report.left)
  assert call.split('(')[0] + '(' in out  # left as it was


def test_partial_or_shared_local_becomes_an_instance():
  out, _ = up('''
      from flax import nn

      class Enc(nn.Module):
        def apply(self, tokens, shared=None, logits_via_embedding=False):
          if shared is None:
            embed = nn.Embed.partial(num_embeddings=5, features=4)
          else:
            embed = shared
          x = nn.Dense(tokens.astype(jnp.float32)[..., None], 4)
          x = x + embed(tokens)
          if logits_via_embedding:
            return embed.attend(x)
          return x
      ''')
  assert ("embed = nn.Embed(num_embeddings=5, features=4, name='Embed_1')"
          in out), out
  assert 'x = x + embed(tokens)' in out
  assert f'{TODO}: embed.attend: legacy called a module method' in out
  assert 'functools' not in out


def test_partial_local_called_in_a_loop_is_left_alone():
  out, _ = up('''
      from flax import nn

      class Enc(nn.Module):
        def apply(self, x, shared=None):
          if shared is None:
            dense = nn.Dense.partial(features=4)
          else:
            dense = shared
          for _ in range(2):
            x = dense(x)
          return x
      ''')
  # legacy creates one module per call there: the partial stays a partial
  assert 'dense = functools.partial(nn.Dense, features=4)' in out
  assert 'nn.Dense(features=4, name=' not in out


# -- the mask helper, against flaxlegacy's own legacy attention masks --

def _legacy_mask(q, kv, causal=False, pm=None, kpm=None, seg=None,
                 kseg=None, heads=2):
  """The legacy mask, as flaxlegacy's flax.nn.attention builds it."""
  from flaxlegacy.nn import attention as legacy  # pylint: disable=g-import-not-at-top
  qs = q.shape[:-1] + (heads, 3)
  ks = kv.shape[:-1] + (heads, 3)
  masks = []
  if causal:
    masks.append(legacy._make_causal_mask(jnp.zeros(ks), (1,)))  # pylint: disable=protected-access
  is_self = kv is q
  if pm is not None or kpm is not None:
    if kpm is None:
      kpm = pm if is_self else jnp.full((kv.shape[1],), True)
    if pm is None:
      pm = kpm if is_self else jnp.full((q.shape[1],), True)
    masks.append(legacy.make_padding_mask(pm, kpm, qs, ks, (1,)))
  if seg is not None:
    kseg = seg if kseg is None else kseg
    masks.append(legacy.make_padding_mask(seg, kseg, qs, ks, (1,),
                                          segmentation_mask=True))
  if not masks:
    return None
  mask = masks[0]
  for m in masks[1:]:
    mask = jnp.logical_and(mask, m)
  return mask > 0


@pytest.mark.parametrize('case', [
    dict(causal=True), dict(pm='q'), dict(pm='q', causal=True),
    dict(pm='q', kpm='k', cross=True), dict(kpm='k', cross=True),
    dict(pm='q', cross=True), dict(seg='q', kseg='k', cross=True),
    dict(seg='q', pm='q', causal=True), dict(pm='q2d'),
], ids=lambda c: '-'.join(sorted(c)))
def test_mask_helper_matches_legacy_masks(case):
  rng = np.random.RandomState(0)
  q = jnp.asarray(rng.normal(size=(2, 5, 4)), jnp.float32)
  cross = case.get('cross')
  kv = jnp.asarray(rng.normal(size=(2, 6 if cross else 5, 4)),
                   jnp.float32) if cross else q
  tok_q = rng.randint(0, 3, size=(2, 5))
  tok_k = rng.randint(0, 3, size=(2, kv.shape[1]))
  arrays = {'q': jnp.asarray(tok_q > 0)[..., None],
            'q2d': jnp.asarray(tok_q, jnp.float32),
            'k': jnp.asarray(tok_k > 0)[..., None]}
  seg = {'q': jnp.asarray(tok_q), 'k': jnp.asarray(tok_k)}
  kw = dict(pm=arrays.get(case.get('pm')), kpm=arrays.get(case.get('kpm')),
            seg=seg.get(case.get('seg')), kseg=seg.get(case.get('kseg')),
            causal=case.get('causal', False))
  want = _legacy_mask(q, kv, **kw)
  got = upgraded_attention.legacy_attention_mask(
      q, kv if cross else None, causal_mask=kw['causal'],
      padding_mask=kw['pm'], key_padding_mask=kw['kpm'],
      segmentation=kw['seg'], key_segmentation=kw['kseg'])
  assert got.dtype == jnp.bool_
  want = np.broadcast_to(np.asarray(want), (2, 1) + want.shape[2:])
  got = np.broadcast_to(np.asarray(got), want.shape)
  np.testing.assert_array_equal(got, want)
  assert want.any() and not want.all()  # not a vacuous comparison


def test_mask_helper_refuses_what_linen_cannot_do():
  x = jnp.zeros((2, 3, 5, 4))
  with pytest.raises(ValueError, match=r'legacy attention over axes \(1, 2\)'):
    upgraded_attention.legacy_attention_mask(x)
  with pytest.raises(ValueError, match=r'over axes \(1,\) of a rank-4'):
    upgraded_attention.legacy_attention_mask(x, attention_axis=(1,))
  # the axis linen attends over, without masks: fine
  assert upgraded_attention.legacy_attention_mask(
      x, attention_axis=(2,)) is None
  with pytest.raises(ValueError, match='masks on a rank-4 input'):
    upgraded_attention.legacy_attention_mask(x, attention_axis=(2,),
                                             causal_mask=True)
  y = jnp.zeros((2, 5, 4))
  with pytest.raises(AssertionError, match='Caching is only support'):
    upgraded_attention.legacy_attention_mask(y, decode=True)
  with pytest.raises(AssertionError, match='key_segmentation is required'):
    upgraded_attention.legacy_attention_mask(
        y, jnp.zeros((2, 6, 4)), segmentation=jnp.zeros((2, 5)))
  with pytest.raises(ValueError, match=r'padding_mask of shape \(2, 5, 2\)'):
    upgraded_attention.legacy_attention_mask(
        y, padding_mask=jnp.ones((2, 5, 2)))
  # decoding: padding is not applied (legacy 0.3.0+), causal is
  m = upgraded_attention.legacy_attention_mask(
      y, causal_mask=True, padding_mask=jnp.zeros((2, 5)), decode=True)
  np.testing.assert_array_equal(np.asarray(m)[0, 0], np.tril(np.ones((5, 5))))


def test_mask_helper_imports_no_legacy_api():
  env = dict(os.environ, FLAXLEGACY='off', PYTHONPATH=ROOT)
  code = ('import sys, flaxlegacy.migrate.upgraded_attention; '
          "print(sorted(m for m in sys.modules if m.startswith(("
          "'flaxlegacy.nn', 'flax.nn', 'flaxlegacy.optim'))))")
  p = subprocess.run([sys.executable, '-c', code], env=env,
                     capture_output=True, text=True, check=True)
  assert p.stdout.strip() == '[]'


# -- numbers: verify (legacy vs upgraded with FLAXLEGACY=off) --

NUMERIC = '''
from flax import nn
import jax.numpy as jnp


class Model(nn.Module):

  def apply(self, x, kv, tokens, kv_tokens, num_heads=2, shared=None):
    if shared is None:
      embed = nn.Embed.partial(num_embeddings=3, features=8)
    else:
      embed = shared
    x = x + embed(tokens)
    pm = (tokens > 0)[..., None]
    kpm = (kv_tokens > 0)[..., None]
    y = nn.LayerNorm(x)
    y = nn.SelfAttention(y, num_heads=num_heads, causal_mask=True,
                         padding_mask=pm, bias=False)
    x = x + y
    z = nn.MultiHeadDotProductAttention(
        x, kv, num_heads, qkv_features=4, out_features=6, padding_mask=pm,
        key_padding_mask=kpm, segmentation=tokens,
        key_segmentation=kv_tokens)
    return nn.Dense(z, 3)
'''


@pytest.mark.slow
def test_attention_verifies_numerically(tmp_path):
  legacy = tmp_path / 'legacy.py'
  legacy.write_text(NUMERIC)
  out, report = upgrade_source(NUMERIC)
  assert TODO not in out, out
  upgraded = tmp_path / 'upgraded.py'
  upgraded.write_text(out)
  (mod,) = report.modules
  assert mod['call'] == ['x', 'kv', 'tokens', 'kv_tokens']
  result = verify.verify_module(
      str(legacy), str(upgraded), 'Model',
      [((2, 5, 8), 'float32'), ((2, 6, 8), 'float32'), ((2, 5), 'int32'),
       ((2, 6), 'int32')], {}, fields=mod['fields'], call=mod['call'],
      var_kw=mod['var_kw'])
  assert result['status'] == 'ok', result


# -- decoding: legacy Cache vs linen decode=True / 'cache' collection --

DECODER = '''
from flax import nn


class Decoder(nn.Module):

  def apply(self, inputs, cache=None):
    x = nn.Dense(inputs, 4)
    x = nn.SelfAttention(x, num_heads=2, qkv_features=6, causal_mask=True,
                         cache=cache)
    return nn.SelfAttention(x, num_heads=2, causal_mask=True, cache=cache,
                            name='second')
'''

LEGACY_DECODE = '''
import pickle, sys
import flaxlegacy
flaxlegacy.activate()
import jax, numpy as np
from flax import nn
sys.path.insert(0, sys.argv[1])
import legacy_decoder as m
x = np.random.RandomState(0).normal(size=(2, 5, 3)).astype(np.float32)
with nn.attention.Cache().mutate() as cache_def:
  _, params = m.Decoder.init_by_shape(jax.random.PRNGKey(0),
                                      [((2, 5, 3), jax.numpy.float32)],
                                      cache=cache_def)
params = jax.tree_util.tree_map(lambda p: p + 0.3, params)
model = nn.Model(m.Decoder, params)
full = model(x)
cache = cache_def.initialize_cache((2, 5))
steps = []
for t in range(5):
  with cache.mutate() as new_cache:
    steps.append(np.asarray(model(x[:, t:t + 1], cache=new_cache)))
  cache = new_cache
pickle.dump({'params': jax.tree_util.tree_map(np.asarray, params), 'x': x,
             'full': np.asarray(full), 'steps': steps},
            open(sys.argv[2], 'wb'))
'''

LINEN_DECODE = '''
import json, pickle, sys
import jax, numpy as np
sys.path.insert(0, sys.argv[1])
import upgraded_decoder as m
ref = pickle.load(open(sys.argv[2], 'rb'))
x = ref['x']
full = m.Decoder().apply({'params': ref['params']}, x)
model = m.Decoder(cache=True)
cache = model.init(jax.random.PRNGKey(0), x)['cache']
steps = []
for t in range(5):
  y, new = model.apply({'params': ref['params'], 'cache': cache},
                       x[:, t:t + 1], mutable=['cache'])
  cache = new['cache']
  steps.append(np.asarray(y))
print(json.dumps({
    'legacy_loaded': sorted(k for k in sys.modules
                            if k.startswith(('flax.nn', 'flaxlegacy.nn'))),
    'full': float(np.max(np.abs(full - ref['full']))),
    'steps': [float(np.max(np.abs(a - b)))
              for a, b in zip(steps, ref['steps'])],
    'scale': float(np.max(np.abs(ref['full']))),
    'steps_vs_full': float(np.max(np.abs(
        np.concatenate(ref['steps'], 1) - ref['full'])))}))
'''


@pytest.mark.slow
def test_cache_decoding_matches_legacy(tmp_path):
  """Legacy ``Cache`` decoding and linen ``decode=True`` step by step.

  Tolerance: 1e-5 of the largest output, as in verify (float32; measured
  differences are at float rounding level).
  """
  out, _ = upgrade_source(DECODER)
  assert 'decode=self.cache is not None' in out
  (tmp_path / 'legacy_decoder.py').write_text(DECODER)
  (tmp_path / 'upgraded_decoder.py').write_text(out)
  (tmp_path / 'legacy_side.py').write_text(LEGACY_DECODE)
  (tmp_path / 'linen_side.py').write_text(LINEN_DECODE)
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS='cpu')
  ref = tmp_path / 'ref.pkl'
  subprocess.run([sys.executable, str(tmp_path / 'legacy_side.py'),
                  str(tmp_path), str(ref)], env=env, check=True,
                 capture_output=True, text=True)
  env['FLAXLEGACY'] = 'off'
  p = subprocess.run([sys.executable, str(tmp_path / 'linen_side.py'),
                      str(tmp_path), str(ref)], env=env,
                     capture_output=True, text=True)
  assert p.returncode == 0, p.stderr[-3000:]
  r = json.loads(p.stdout.strip().splitlines()[-1])
  tol = 1e-5 * r['scale']
  assert r['legacy_loaded'] == []
  assert r['scale'] > 0.1
  assert r['full'] <= tol, r
  assert max(r['steps']) <= tol, r
  # decoding is not trivially the full pass: both sides agree with it
  assert r['steps_vs_full'] <= tol, r
