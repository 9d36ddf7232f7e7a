"""Legacy ``flax.nn.attention``: dot-product attention, masks, decoding cache.

What is borrowed from linen and what is legacy's own:

* ``dot_product_attention`` over one attention axis (the axis just before the
  heads, i.e. ``[batch..., length, heads, depth]``) is linen's
  ``dot_product_attention`` with the mask passed as its additive ``bias``:
  same scaling, softmax, dropout mask shapes and contractions.  Legacy also
  attends *jointly* over several axes (the default for rank >= 5 inputs is
  every axis between batch and heads); linen has no such mode, so that case
  is the legacy algorithm below.
* ``MultiHeadDotProductAttention`` is the legacy composition: ``DenseGeneral``
  children ``query``/``key``/``value``/``out`` (each linen's DenseGeneral),
  legacy masks (padding, key padding, segmentation, causal) turned into an
  additive ``-1e10`` bias in ``dtype``, the legacy ``attention_fn`` keyword
  interface and the ``Cache`` protocol.  Linen's attention module has none of
  these (boolean masks, ``finfo.min``, one axis, a different cache), so only
  its pieces are used.
* ``make_padding_mask`` / ``_make_causal_mask`` keep the legacy shapes
  (``[batch, 1, q-axes..., k-axes...]``) that linen's mask helpers lack.
"""

from collections.abc import Iterable  # pylint: disable=g-importing-member
import warnings

from flax import jax_utils
from flax import struct
from flax.linen import attention as linen_attention
import jax
from jax import lax
from jax import random
import jax.numpy as jnp
import numpy as np

from flaxlegacy.nn import _layer_util
from flaxlegacy.nn import base
from flaxlegacy.nn import initializers
from flaxlegacy.nn.linear import default_kernel_init
from flaxlegacy.nn.linear import DenseGeneral
from flaxlegacy.nn.stochastic import make_rng

_AXIS_ERROR = ('Attention axis must be between the batch axis and the '
               'last-two axes.')


def _attention_axes(axis, ndim):
  """Legacy default (every axis between batch and heads) and validation."""
  if axis is None:
    axis = tuple(range(1, ndim - 2))
  elif not isinstance(axis, Iterable):
    axis = (axis,)
  axis = tuple(axis)
  for ax in axis:
    if not (ndim >= 3 and 1 <= ax < ndim - 2):
      raise ValueError(_AXIS_ERROR)
  return axis


def _invert_perm(perm):
  inverse = [0] * len(perm)
  for i, j in enumerate(perm):
    inverse[j] = i
  return tuple(inverse)


def dot_product_attention(query,
                          key,
                          value,
                          dtype=jnp.float32,
                          bias=None,
                          axis=None,
                          broadcast_dropout=True,
                          dropout_rng=None,
                          dropout_rate=0.,
                          deterministic=False,
                          precision=None):
  """Dot-product attention of ``query`` over ``key``/``value``.

  Args:
    query: ``[batch, d1..dN, heads, depth]``.
    key: ``[batch, d1..dN, heads, depth]``.
    value: ``[batch, d1..dN, heads, v_depth]``.
    dtype: dtype of the attention weights (default: float32).
    bias: added to the logits (masks as ``-1e10``, proximity bias ...).
    axis: attention axes (default: every axis between batch and heads).
    broadcast_dropout: share the dropout mask over batch, heads and the
      non-attention axes.
    dropout_rng: key of the dropout mask (default: ``nn.make_rng()``).
    dropout_rate: dropout rate of the attention weights.
    deterministic: disable dropout.
    precision: ``lax.Precision`` of the two contractions.
  Returns:
    ``[batch, d1..dN, heads, v_depth]``.
  """
  assert key.shape[:-1] == value.shape[:-1], (
      f'key and value shapes differ before the last axis: {key.shape} vs '
      f'{value.shape}')
  assert (query.shape[0:1] == key.shape[0:1] and
          query.shape[-1] == key.shape[-1]), (
              f'query {query.shape} and key {key.shape} must have the same '
              'batch size and depth')
  assert key.ndim == query.ndim == value.ndim, (
      f'query, key and value must have the same rank: {query.shape}, '
      f'{key.shape}, {value.shape}')
  n = key.ndim
  axis = _attention_axes(axis, n)
  if not deterministic and dropout_rate > 0. and dropout_rng is None:
    dropout_rng = make_rng()
  if axis == (n - 3,):
    return linen_attention.dot_product_attention(
        query, key, value, bias=bias, broadcast_dropout=broadcast_dropout,
        dropout_rng=dropout_rng, dropout_rate=dropout_rate,
        deterministic=deterministic, dtype=dtype, precision=precision)
  return _multi_axis_attention(query, key, value, dtype, bias, axis,
                               broadcast_dropout, dropout_rng, dropout_rate,
                               deterministic, precision)


def _multi_axis_attention(query, key, value, dtype, bias, axis,
                          broadcast_dropout, dropout_rng, dropout_rate,
                          deterministic, precision):
  """Legacy attention jointly over several axes (linen attends over one).

  The attention axes are moved behind the "batch" axes (batch, non-attention
  axes, heads); the logits ``[batch..., q-axes..., k-axes...]`` are
  normalised jointly over all key axes.
  """
  n = key.ndim
  batch_axes = tuple(i for i in range(n) if i not in axis + (n - 1,))
  qk_perm = batch_axes + axis + (n - 1,)
  query = query.transpose(qk_perm)
  key = key.transpose(qk_perm)
  value = value.transpose(batch_axes + (n - 1,) + axis)
  query = query / jnp.sqrt(query.shape[-1]).astype(dtype)
  batch = tuple(range(len(batch_axes)))
  weights = lax.dot_general(query, key, (((n - 1,), (n - 1,)), (batch, batch)),
                            precision=precision)
  if bias is not None:
    weights = weights + bias
  norm_dims = tuple(range(weights.ndim - len(axis), weights.ndim))
  weights = jax.nn.softmax(weights, axis=norm_dims).astype(dtype)
  if not deterministic and dropout_rate > 0.:
    keep_prob = 1.0 - dropout_rate
    if broadcast_dropout:
      mask_shape = (1,) * len(batch) + weights.shape[-2 * len(axis):]
    else:
      mask_shape = weights.shape
    keep = random.bernoulli(dropout_rng, keep_prob, mask_shape)
    weights = weights * (keep.astype(weights.dtype) /
                         jnp.asarray(keep_prob, dtype=dtype))
  value_dims = tuple(range(value.ndim - len(axis), value.ndim))
  y = lax.dot_general(weights, value, ((norm_dims, value_dims), (batch, batch)),
                      precision=precision)
  return y.transpose(_invert_perm(qk_perm))


@struct.dataclass
class _CacheEntry:
  key: np.ndarray
  value: np.ndarray
  i: np.ndarray


def scan_in_dim(*args, **kwargs):
  """Deprecated alias of ``flax.jax_utils.scan_in_dim``."""
  warnings.warn('scan_in_dim moved to flax.jax_utils', DeprecationWarning)
  return jax_utils.scan_in_dim(*args, **kwargs)


class Cache(base.Collection):
  """Keys and values of past positions for autoregressive decoding.

  Protocol: initialise the model with ``cache=Cache().mutate()``-d copy (each
  attention module records ``[key.ndim, heads, head_dim]`` at its path), call
  ``initialize_cache((batch,) + attention_dims)``, then decode one position
  per call with ``cache.mutate()``.
  """

  def initialize_cache(self, shape, dtype=None):
    """A new Cache with zero keys/values for ``shape`` = batch + attention dims.

    Args:
      shape: tuple of the batch and attention dimension sizes.
      dtype: dtype of the cached keys and values (default: float32).
    Returns:
      The initialized (immutable) Cache.
    """
    dtype = jnp.float32 if dtype is None else dtype
    shape = tuple(shape)

    def init_entry(record):
      full_shape = shape + tuple(int(d) for d in record[1:])
      if len(full_shape) != int(record[0]):
        # Legacy's text, missing space included.
        raise ValueError('Shape should be a tuple with the shape of the batch'
                         'and attention dims.')
      return _CacheEntry(key=jnp.zeros(full_shape, dtype),
                         value=jnp.zeros(full_shape, dtype),
                         i=jnp.zeros((), jnp.uint32))

    return Cache(jax.tree_util.tree_map(init_entry, self.state))


jax.tree_util.register_pytree_node(Cache, base.iterate_collection,
                                   base.collection_from_iterable)


def _decode_step(module, cache, key, value, inputs_q, attention_axis):
  """Writes this step's key/value into the cache; returns the full arrays.

  Also returns the updated counter ``i`` (the number of positions filled).
  """
  entry = cache.retrieve(None)
  if not isinstance(entry, _CacheEntry):
    # Legacy tripped over the missing ``.key`` first (AttributeError).
    raise _layer_util.layer_error(module, ValueError,
                                  'Cache is not initialized.')
  cshape = entry.key.shape
  expected = list(cshape[:-2])
  for ax in attention_axis:
    expected[ax] = 1
  expected = tuple(expected) + inputs_q.shape[-1:]
  if expected != inputs_q.shape:
    raise _layer_util.layer_error(
        module, ValueError, 'Invalid shape provided, expected shape %s '
        'instead got %s.' % (expected, inputs_q.shape))
  # The flat position counter, unravelled row-major over the attention axes.
  indices = [0] * len(cshape)
  i = entry.i
  size = int(np.prod([cshape[ax] for ax in attention_axis]))
  for ax in attention_axis:
    size //= cshape[ax]
    # dynamic_update_slice wants one index dtype; the zeros are int32.
    indices[ax] = (i // size).astype(jnp.int32)
    i = i % size
  key = lax.dynamic_update_slice(entry.key, key, indices)
  value = lax.dynamic_update_slice(entry.value, value, indices)
  entry = entry.replace(i=entry.i + jnp.array(1, jnp.uint32), key=key,
                        value=value)
  cache.store(entry)
  return key, value, entry.i


class MultiHeadDotProductAttention(base.Module):
  """Multi-head dot-product attention."""

  def apply(self,
            inputs_q,
            inputs_kv,
            num_heads,
            dtype=jnp.float32,
            qkv_features=None,
            out_features=None,
            attention_axis=None,
            causal_mask=False,
            padding_mask=None,
            key_padding_mask=None,
            segmentation=None,
            key_segmentation=None,
            cache=None,
            broadcast_dropout=True,
            dropout_rng=None,
            dropout_rate=0.,
            deterministic=False,
            precision=None,
            kernel_init=default_kernel_init,
            bias_init=initializers.zeros,
            bias=True,
            attention_fn=dot_product_attention):
    """Projects to multi-head q/k/v, attends, and projects back.

    Args:
      inputs_q: ``[batch, d1..dN, features]``.
      inputs_kv: ``[batch, d1..dN, features]``, or None for self-attention.
      num_heads: number of heads (must divide ``qkv_features``).
      dtype: dtype of the computation (default: float32).
      qkv_features: size of query/key/value (default: input features).
      out_features: size of the output (default: input features).
      attention_axis: attention axes (default: all between batch and
        features).
      causal_mask: mask out future positions.
      padding_mask: query padding mask (truthy = real token).
      key_padding_mask: key padding mask.
      segmentation: segment ids of packed query inputs.
      key_segmentation: segment ids of packed key inputs.
      cache: an ``attention.Cache`` for autoregressive decoding.
      broadcast_dropout: share the dropout mask over batch/heads.
      dropout_rng: key of the dropout mask (default: ``nn.make_rng()``).
      dropout_rate: dropout rate of the attention weights.
      deterministic: disable dropout.
      precision: ``lax.Precision`` of the matmuls.
      kernel_init: initializer of the projection kernels.
      bias_init: initializer of the projection biases.
      bias: whether the projections have biases.
      attention_fn: ``dot_product_attention`` or a function taking the same
        keywords.
    Returns:
      ``[batch, d1..dN, out_features]``.
    """
    assert causal_mask or cache is None, (
        'Caching is only support for causal attention.')
    if inputs_kv is None:
      inputs_kv = inputs_q
    is_self_attention = inputs_kv is inputs_q
    if attention_axis is None:
      attention_axis = tuple(range(1, inputs_q.ndim - 1))
    features = out_features or inputs_q.shape[-1]
    qkv_features = qkv_features or inputs_q.shape[-1]
    assert qkv_features % num_heads == 0, (
        'Memory dimension must be divisible by number of heads.')
    head_dim = qkv_features // num_heads

    dense = DenseGeneral.partial(
        axis=-1, features=(num_heads, head_dim), kernel_init=kernel_init,
        bias_init=bias_init, bias=bias, precision=precision)
    query = dense(inputs_q, dtype=dtype, name='query')
    key = dense(inputs_kv, dtype=dtype, name='key')
    value = dense(inputs_kv, dtype=dtype, name='value')

    decoding = False
    if cache is not None:
      assert isinstance(cache, Cache), 'cache must be an instance of Cache'
      if self.is_initializing():
        cache.store(np.array((key.ndim,) + key.shape[-2:], dtype=np.int32))
      else:
        decoding = True
        key, value, filled = _decode_step(self, cache, key, value, inputs_q,
                                          attention_axis)

    masks = []
    if causal_mask:
      if decoding:
        # Attend to the positions written so far (all of the cache's
        # attention axes, flattened row-major).
        attn_shape = tuple(key.shape[ax] for ax in attention_axis)
        positions = jnp.arange(int(np.prod(attn_shape)), dtype=jnp.uint32)
        masks.append((positions < filled).reshape(
            (1,) * (key.ndim - 1) + attn_shape))
      else:
        masks.append(_make_causal_mask(key, attention_axis))
    # 0.3.0+: a lone key_padding_mask counts, and padding is ignored while
    # decoding (the causal cache mask covers it).
    if ((padding_mask is not None or key_padding_mask is not None) and
        cache is None):
      if key_padding_mask is None:
        key_padding_mask = (padding_mask if is_self_attention else jnp.full(
            [inputs_kv.shape[ax] for ax in attention_axis], True))
      if padding_mask is None:
        padding_mask = (key_padding_mask if is_self_attention else jnp.full(
            [inputs_q.shape[ax] for ax in attention_axis], True))
      masks.append(make_padding_mask(padding_mask, key_padding_mask,
                                     query.shape, key.shape, attention_axis))
    if segmentation is not None:
      if key_segmentation is None:
        assert is_self_attention, (
            'key_segmentation is required for encoder-decoder attention')
        key_segmentation = segmentation
      masks.append(make_padding_mask(segmentation, key_segmentation,
                                     query.shape, key.shape, attention_axis,
                                     segmentation_mask=True))
    if masks:
      mask = masks[0]
      for other in masks[1:]:
        mask = jnp.logical_and(mask, other)
      attention_bias = lax.select(mask > 0,
                                  jnp.full(mask.shape, 0., dtype),
                                  jnp.full(mask.shape, -1e10, dtype))
    else:
      attention_bias = None

    x = attention_fn(
        query, key, value, dtype=dtype, axis=attention_axis,
        bias=attention_bias, precision=precision, dropout_rng=dropout_rng,
        dropout_rate=dropout_rate, broadcast_dropout=broadcast_dropout,
        deterministic=deterministic)
    return DenseGeneral(x, features=features, axis=(-2, -1),
                        kernel_init=kernel_init, bias_init=bias_init,
                        bias=bias, dtype=dtype, precision=precision,
                        name='out')


SelfAttention = MultiHeadDotProductAttention.partial(inputs_kv=None)


def make_padding_mask(padding_mask_query,
                      padding_mask_key,
                      query_shape,
                      key_shape,
                      attention_axis=None,
                      segmentation_mask=False):
  """Float32 mask ``[batch, 1, q-axes..., k-axes...]`` from two padding masks.

  Args:
    padding_mask_query: ``[batch, q-axes...]`` (optionally ``[..., 1]``),
      truthy for real tokens.
    padding_mask_key: ``[batch, k-axes...]`` likewise.
    query_shape: shape of the (projected) query.
    key_shape: shape of the (projected) key.
    attention_axis: attention axes (default: all between batch and heads).
    segmentation_mask: compare with ``==`` (segment ids) instead of ``*``.
  Returns:
    The mask; for several axes the key positions come out in reversed axis
    order, as in legacy.
  """
  assert query_shape[0] == key_shape[0], (
      f'query and key batch sizes differ: {query_shape} vs {key_shape}')
  assert len(query_shape) == len(key_shape), (
      f'query and key ranks differ: {query_shape} vs {key_shape}')
  ndim = len(key_shape)
  if attention_axis is None:
    attention_axis = tuple(range(1, ndim - 2))
  assert isinstance(attention_axis, tuple), (
      f'attention_axis must be a tuple, got {attention_axis!r}')
  _attention_axes(attention_axis, ndim)
  final_shape = ((query_shape[0], 1) +
                 tuple(query_shape[ax] for ax in attention_axis) +
                 tuple(key_shape[ax] for ax in attention_axis))
  q = padding_mask_query[..., None]
  k = padding_mask_key[..., None]
  k = k.transpose((0,) + tuple(range(k.ndim - 1, 0, -1)))
  mask = jnp.equal(q, k) if segmentation_mask else jnp.multiply(q, k)
  return lax.convert_element_type(mask.reshape(final_shape), jnp.float32)


def _make_causal_mask(key, attention_axis=None, self_mask=False):
  """Boolean ``flat_q >= flat_k`` mask (``>`` with ``self_mask``).

  Shape: ``(1,) * (key.ndim - len(axes) - 1) + attn dims + attn dims``, flat
  positions counted row-major over the attention axes.
  """
  if attention_axis is None:
    attention_axis = tuple(range(1, key.ndim - 2))
  assert isinstance(attention_axis, tuple), (
      f'attention_axis must be a tuple, got {attention_axis!r}')
  _attention_axes(attention_axis, key.ndim)
  attn_dims = tuple(key.shape[ax] for ax in attention_axis)
  size = int(np.prod(attn_dims))
  positions = jnp.arange(size, dtype=jnp.int32)
  offset = -1 if self_mask else 0
  mask = lax.ge(
      lax.broadcast_in_dim(positions, (size, size), (0,)) + offset,
      lax.broadcast_in_dim(positions, (size, size), (1,)))
  return mask.reshape((1,) * (key.ndim - len(attention_axis) - 1) +
                      attn_dims + attn_dims)
