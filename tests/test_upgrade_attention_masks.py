"""Legacy attention's mask builders, imported by code that assembles its own
attention module.

Research code that wrote its own variant of legacy
``MultiHeadDotProductAttention`` (long-range-arena's synthesizer, local,
sinkhorn, sparse and longformer attentions) built the masks with legacy's
helpers: ``from flax.deprecated.nn.attention import make_padding_mask``,
``_make_causal_mask``, ``dot_product_attention``, or
``nn.attention.make_padding_mask(...)`` in the body.  Linen has no such
functions (its ``make_attention_mask`` / ``make_causal_mask`` take other
arguments and give other shapes).  Before, the imports stayed legacy with a
TODO (the upgraded file did not import with ``FLAXLEGACY=off``) and the
attribute form kept a TODO and ``nn.attention...`` on linen's ``nn``
(AttributeError).  Now both are the legacy functions flaxlegacy ships with
their legacy interface (``upgraded_attention.legacy_make_padding_mask``,
``legacy_make_causal_mask``, ``legacy_dot_product_attention``), imported
under the local names, and the upgraded module computes what the legacy
one did.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flaxlegacy.migrate import upgraded_attention
from tests import upgrade_run

TODO = 'TODO(flaxlegacy upgrade)'

ATTENTION = '''
import jax.numpy as jnp
from jax import lax
from flax import nn
from flax.nn.attention import make_padding_mask
from flax.nn.attention import _make_causal_mask
from flax.deprecated.nn.attention import dot_product_attention as attend


''' + upgrade_run.RAMP_SRC + '''

class HandAttention(nn.Module):
  """Multi-head attention put together from legacy's pieces."""

  def apply(self, x, keep, axes, heads=2, depth=3, causal=False,
            segments=None):
    q = nn.DenseGeneral(x, (heads, depth), kernel_init=ramp, name='query')
    k = nn.DenseGeneral(x * 0.5, (heads, depth), kernel_init=ramp,
                        name='key')
    v = nn.DenseGeneral(x, (heads, depth), kernel_init=ramp, name='value')
    parts = [make_padding_mask(keep, keep, q.shape, k.shape,
                               attention_axis=axes)]
    if causal:
      parts.append(_make_causal_mask(k, attention_axis=axes))
    if segments is not None:
      parts.append(nn.attention.make_padding_mask(
          segments, segments, q.shape, k.shape, attention_axis=axes,
          segmentation_mask=True))
    mask = parts[0]
    for p in parts[1:]:
      mask = jnp.logical_and(mask, p)
    bias = lax.select(mask > 0, jnp.zeros(mask.shape),
                      jnp.full(mask.shape, -1e10))
    y = attend(q, k, v, bias=bias, axis=axes, deterministic=True)
    return nn.DenseGeneral(y, x.shape[-1], axis=(-2, -1), kernel_init=ramp,
                           name='out')
'''

MODEL = '''
import jax.numpy as jnp
from flax import nn

import attention


class Sequence(nn.Module):

  def apply(self, x):
    keep = (jnp.abs(x[..., 0]) < 1.2).astype(jnp.float32)
    segments = (x[..., 1] > 0).astype(jnp.int32) + 1
    y = attention.HandAttention(x, keep, (1,), causal=True,
                                segments=segments, name='att')
    return attention.HandAttention(y, keep, (1,), name='att2')


class Grid(nn.Module):

  def apply(self, x):
    keep = (x[..., :1] > -0.8).astype(jnp.float32)
    return attention.HandAttention(x, keep, (1, 2), causal=True, name='att')
'''

INPUTS = '''
import json
import jax
import jax.numpy as jnp
import numpy as np
import model

rs = np.random.RandomState(0)
seq = jnp.asarray(rs.normal(size=(2, 5, 4)), jnp.float32)
grid = jnp.asarray(rs.normal(size=(2, 3, 2, 4)), jnp.float32)
cases = [('seq', model.Sequence, (seq,)), ('grid', model.Grid, (grid,))]
out = {}
'''

RUN = INPUTS + '''
for name, cls, args in cases:
  y, params = cls.init(jax.random.PRNGKey(0), *args)
  flat = jax.tree_util.tree_flatten_with_path(params)[0]
  out[name] = {'y': np.asarray(y).tolist(),
               'paths': sorted(jax.tree_util.keystr(p) for p, _ in flat)}
print(json.dumps(out))
'''

UPGRADED_RUN = RUN.replace(
    '  y, params = cls.init(jax.random.PRNGKey(0), *args)\n',
    '  y, v = cls().init_with_output(jax.random.PRNGKey(0), *args)\n'
    "  params = v['params']\n")


def test_mask_builders_upgraded_and_compute_the_legacy_numbers(tmp_path):
  src, out, report = upgrade_run.upgrade_dir(
      tmp_path, {'attention.py': ATTENTION, 'model.py': MODEL})
  text = (out / 'attention.py').read_text()
  assert TODO not in text, text
  assert 'flax.nn.attention' not in text and 'flax.deprecated' not in text
  assert 'nn.attention.' not in text, text
  assert 'legacy_make_padding_mask as make_padding_mask' in text, text
  assert 'legacy_make_causal_mask as _make_causal_mask' in text, text
  assert 'legacy_dot_product_attention as attend' in text, text
  assert 'legacy_make_padding_mask(' in text.split('class HandAttention')[1]
  assert not any(f['left'] for f in report['files'].values()), report
  legacy = upgrade_run.run_json(src, RUN, off=False)
  upgraded = upgrade_run.run_json(out, UPGRADED_RUN, off=True)
  for name in ('seq', 'grid'):
    assert upgraded[name]['paths'] == legacy[name]['paths']
    np.testing.assert_allclose(upgraded[name]['y'], legacy[name]['y'],
                               rtol=1e-5, atol=1e-6)


def test_import_with_other_legacy_names_keeps_its_todo(tmp_path):
  """A statement that also imports what has no shipped function (the
  decoding cache's classes) is left whole, with its TODO."""
  source = ('from flax.deprecated.nn.attention import Cache, '
            'make_padding_mask\n\n\ndef f(c):\n'
            '  return isinstance(c, Cache), make_padding_mask\n')
  _, out, _ = upgrade_run.upgrade_dir(tmp_path, {'m.py': source})
  text = (out / 'm.py').read_text()
  assert TODO in text
  assert 'from flax.deprecated.nn.attention import Cache, make_padding_mask' \
      in text


def test_root_import_of_dot_product_attention(tmp_path):
  """``from flax.nn import dot_product_attention`` (the name legacy
  re-exported at the package root) is the shipped function too."""
  source = ('from flax.nn import dot_product_attention\n\n\n'
            'def attend(q, k, v):\n'
            '  return dot_product_attention(q, k, v, axis=(1,))\n')
  _, out, _ = upgrade_run.upgrade_dir(tmp_path, {'m.py': source})
  text = (out / 'm.py').read_text()
  assert TODO not in text, text
  assert ('import legacy_dot_product_attention as dot_product_attention'
          in text), text
  assert 'flax.nn' not in text, text


# -- the shipped functions against the layer's own --

@pytest.mark.parametrize('shape,axes,mask_shape', [
    ((2, 4, 2, 5), None, (2, 4)),
    ((2, 4, 2, 5), (1,), (2, 4, 1)),
    ((2, 3, 4, 2, 5), None, (2, 3, 4, 1)),
    ((2, 3, 4, 2, 5), (1, 2), (2, 3, 4, 1))])
@pytest.mark.parametrize('segmentation', [False, True])
def test_shipped_padding_mask_is_legacys(shape, axes, mask_shape,
                                         segmentation):
  from flax import nn  # pylint: disable=g-import-not-at-top
  rs = np.random.RandomState(1)
  q_pad = jnp.asarray(rs.randint(0, 3, size=mask_shape), jnp.float32)
  k_pad = jnp.asarray(rs.randint(0, 3, size=mask_shape), jnp.float32)
  kw = dict(attention_axis=axes, segmentation_mask=segmentation)
  got = upgraded_attention.legacy_make_padding_mask(
      q_pad, k_pad, shape, shape, **kw)
  want = nn.attention.make_padding_mask(q_pad, k_pad, shape, shape, **kw)
  assert got.dtype == want.dtype == jnp.float32
  assert got.shape == want.shape
  np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize('axes', [None, (1,), (2,), (1, 2)])
@pytest.mark.parametrize('self_mask', [False, True])
def test_shipped_causal_mask_is_legacys(axes, self_mask):
  from flax import nn  # pylint: disable=g-import-not-at-top
  key = jnp.zeros((2, 3, 4, 2, 5))
  got = upgraded_attention.legacy_make_causal_mask(key, axes, self_mask)
  want = nn.attention._make_causal_mask(key, axes, self_mask)  # pylint: disable=protected-access
  assert got.shape == want.shape
  np.testing.assert_array_equal(got, want)
  # jit-able (the key's values are not used)
  np.testing.assert_array_equal(
      jax.jit(lambda k: upgraded_attention.legacy_make_causal_mask(
          k, axes, self_mask))(key), want)


def test_shipped_masks_refuse_other_axes():
  with pytest.raises(ValueError, match='between the batch axis'):
    upgraded_attention.legacy_make_causal_mask(jnp.zeros((2, 3, 2, 5)), (2,))
  with pytest.raises(TypeError, match='tuple'):
    upgraded_attention.legacy_make_padding_mask(
        jnp.ones((2, 3)), jnp.ones((2, 3)), (2, 3, 2, 5), (2, 3, 2, 5), [1])
