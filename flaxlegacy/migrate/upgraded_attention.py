"""Legacy attention masks for linen attention (used by ``flaxlegacy upgrade``).

Plain ``jax.numpy`` on top of linen: importing this module does not activate
the compatibility layer, so upgraded code that uses it runs with
``FLAXLEGACY=off``.

Legacy ``nn.SelfAttention`` / ``nn.MultiHeadDotProductAttention`` took its
masks as arguments (``causal_mask``, ``padding_mask``, ``key_padding_mask``,
``segmentation``, ``key_segmentation``) and built them itself; linen's
``MultiHeadDotProductAttention`` takes one boolean ``mask``.  The upgrade
rewrites a legacy attention call into linen's module called with
``mask=legacy_attention_mask(...)``: the same mask, built with the legacy
rules (docs: /work/shared/spec/legacy-nn.md 3.14-3.15, the 0.3.0+ padding
rules that flaxlegacy's own ``flax.nn`` follows):

* causal: ``q >= k`` over the key length;
* padding: only when ``padding_mask`` or ``key_padding_mask`` is given and
  the call does not decode; a missing side is the other one for
  self-attention (``inputs_kv is inputs_q``), all-True otherwise; the two
  combine by ``multiply`` (``[batch, L]`` or ``[batch, L, 1]`` masks);
* segmentation: ``segmentation[b, i] == key_segmentation[b, j]``;
  ``key_segmentation`` defaults to ``segmentation`` for self-attention only;
* one component counts where it is ``> 0``; several are combined with
  ``logical_and``.

Legacy added ``-1e10`` to the masked logits; linen replaces them with
``finfo.min``.  Both give a masked position the weight 0, and a row with
every position masked the uniform weights (float32: ``logit - 1e10`` rounds
to ``-1e10`` for every ``|logit| < 512``).

Only one attention axis, the one before the features, has a linen
equivalent; anything else raises ``ValueError`` (legacy attended jointly
over several axes).
"""

import functools

import jax
from jax import lax
import jax.numpy as jnp

__all__ = ['legacy_attention_mask', 'legacy_attention_default',
           'legacy_attention_fn', 'legacy_attention_partial',
           'legacy_dot_product_attention', 'legacy_make_padding_mask',
           'legacy_make_causal_mask']

# legacy attention keyword -> linen MultiHeadDotProductAttention field (the
# constructor's part of a legacy call; the same map as the upgrade
# emitter's ATTENTION_CTOR, which does not import JAX)
LEGACY_ATTENTION_FIELDS = {
    'num_heads': 'num_heads', 'dtype': 'dtype',
    'qkv_features': 'qkv_features', 'out_features': 'out_features',
    'broadcast_dropout': 'broadcast_dropout', 'dropout_rate': 'dropout_rate',
    'deterministic': 'deterministic', 'precision': 'precision',
    'kernel_init': 'kernel_init', 'bias_init': 'bias_init',
    'bias': 'use_bias'}


def _axes(attention_axis, ndim):
  if attention_axis is None:
    return tuple(range(1, ndim - 1))
  if isinstance(attention_axis, int):
    attention_axis = (attention_axis,)
  return tuple(attention_axis)


def _flat(mask, batch, length, what):
  """A legacy ``[batch, L]`` / ``[batch, L, 1]`` / ``[L]`` mask as 2-D."""
  mask = jnp.asarray(mask)
  if mask.shape in ((batch, length), (batch, length, 1)):
    return mask.reshape(batch, length)
  if mask.shape == (length,):  # legacy's all-True filler has no batch axis
    return mask[None, :]
  raise ValueError(f'{what} of shape {mask.shape}: expected [batch, length] '
                   f'or [batch, length, 1] with batch={batch}, '
                   f'length={length}')


def legacy_attention_mask(inputs_q, inputs_kv=None, *, attention_axis=None,
                          causal_mask=False, padding_mask=None,
                          key_padding_mask=None, segmentation=None,
                          key_segmentation=None, decode=False):
  """The legacy attention mask as a linen boolean mask, or None.

  Args:
    inputs_q: the query input ``[batch, L, features]``.
    inputs_kv: the key/value input; None (or ``inputs_q`` itself) for
      self-attention.
    attention_axis: the legacy ``attention_axis`` (default: every axis between
      batch and features).
    causal_mask, padding_mask, key_padding_mask, segmentation,
      key_segmentation: the legacy arguments of the attention call.
    decode: the legacy call had a ``cache`` (linen ``decode=True``).
  Returns:
    A boolean ``[batch or 1, 1, Lq, Lk]`` mask for linen's
    ``MultiHeadDotProductAttention(...)(..., mask=...)``, or None when the
    legacy call had no mask.
  Raises:
    ValueError: for attention over another axis than the one before the
      features (no linen equivalent), or masks of unexpected shapes.
    AssertionError: where legacy asserted (a cache without ``causal_mask``,
      cross-attention segmentation without ``key_segmentation``).
  """
  if inputs_kv is None:
    inputs_kv = inputs_q
  is_self_attention = inputs_kv is inputs_q
  ndim = inputs_q.ndim
  axes = _axes(attention_axis, ndim)
  if axes != (ndim - 2,):
    raise ValueError(
        f'legacy attention over axes {axes} of a rank-{ndim} input: linen '
        'attends over the axis before the features only (axis '
        f'{ndim - 2}); port this attention by hand')
  assert causal_mask or not decode, (
      'Caching is only support for causal attention.')
  has_masks = (causal_mask or padding_mask is not None
               or key_padding_mask is not None or segmentation is not None)
  if not has_masks:
    return None
  if ndim != 3:
    raise ValueError(f'legacy attention masks on a rank-{ndim} input: the '
                     'upgrade supports [batch, length, features] inputs only')
  batch, lq = inputs_q.shape[0], inputs_q.shape[1]
  lk = inputs_kv.shape[1]
  masks = []
  if causal_mask:
    # legacy: on the (projected) key, both axes of key length
    pos = jnp.arange(lk, dtype=jnp.int32)
    masks.append((pos[:, None] >= pos[None, :])[None, None])
  if (padding_mask is not None or key_padding_mask is not None) and (
      not decode):
    if key_padding_mask is None:
      key_padding_mask = (padding_mask if is_self_attention
                          else jnp.full((lk,), True))
    if padding_mask is None:
      padding_mask = (key_padding_mask if is_self_attention
                      else jnp.full((lq,), True))
    q = _flat(padding_mask, batch, lq, 'padding_mask')
    k = _flat(key_padding_mask, batch, lk, 'key_padding_mask')
    masks.append(jnp.multiply(q[:, :, None], k[:, None, :])[:, None])
  if segmentation is not None:
    if key_segmentation is None:
      assert is_self_attention, (
          'key_segmentation is required for encoder-decoder attention')
      key_segmentation = segmentation
    q = _flat(segmentation, batch, lq, 'segmentation')
    k = _flat(key_segmentation, batch, lk, 'key_segmentation')
    masks.append(jnp.equal(q[:, :, None], k[:, None, :])[:, None])
  mask = masks[0]
  for other in masks[1:]:
    mask = jnp.logical_and(mask, other)
  return mask > 0


def legacy_attention_default(module, field, value, linen_class):
  """``linen_class`` where ``module``'s ``field`` holds its default.

  A legacy module called a legacy attention class through a
  hyper-parameter (``self_attention_module=nn.SelfAttention``); the
  upgrade rewrote the call for that class, its default.  Any other value
  (given by a caller or a configuration the upgrade could not see) raises
  instead of running the wrong module.
  """
  default = type(module).__dataclass_fields__[field].default
  kwargs = {}
  if isinstance(value, LegacyAttentionPartial):
    value, kwargs = value.base, value.kwargs
  if value is not default:
    raise NotImplementedError(
        f'{type(module).__name__}.{field} holds {value!r}: the upgrade '
        f'from legacy Flax rewrote its call for the attention of its default '
        f'({default!r}) only; port this call by hand')
  if not kwargs:
    return linen_class
  fields = {}
  for k, v in kwargs.items():
    if k == 'attention_fn':
      fields[k] = legacy_attention_fn(v)
    elif k in LEGACY_ATTENTION_FIELDS:
      fields[LEGACY_ATTENTION_FIELDS[k]] = v
    else:
      raise NotImplementedError(
          f'{type(module).__name__}.{field}.partial({k}=...): the legacy '
          f'attention argument {k!r} has no linen field; port this call by '
          'hand')
  if 'dropout_rate' in kwargs and 'deterministic' not in kwargs:
    fields['deterministic'] = False  # legacy's default; linen has none
  return functools.partial(linen_class, **fields)


class LegacyAttentionPartial:
  """What legacy ``attention_class.partial(**kwargs)`` held, for
  ``legacy_attention_default``: the class and the keywords."""

  def __init__(self, base, kwargs):
    self.base = base
    self.kwargs = kwargs

  def __repr__(self):
    return f'{self.base!r}.partial(**{self.kwargs!r})'


def legacy_attention_partial(base, **kwargs):
  """Legacy ``attention_class.partial(**kwargs)`` of a hyper-parameter
  that holds legacy's attention class (its default): the keywords, kept
  for the call, which ``legacy_attention_default`` checks and maps."""
  if isinstance(base, LegacyAttentionPartial):
    return LegacyAttentionPartial(base.base, {**base.kwargs, **kwargs})
  return LegacyAttentionPartial(base, dict(kwargs))


def legacy_attention_fn(fn):
  """A legacy ``attention_fn`` as linen's ``attention_fn``.

  Legacy attention called its ``attention_fn(query, key, value, dtype=,
  axis=, bias=, precision=, dropout_rng=, dropout_rate=,
  broadcast_dropout=, deterministic=)`` with the mask as an additive bias
  (``0`` where attended, ``-1e10`` where masked, in the attention dtype)
  and the attention axes; linen calls its ``attention_fn`` with the
  boolean ``mask`` and no axes.  The function returned takes linen's
  arguments and calls ``fn`` with legacy's: the bias built as legacy built
  it, the axes legacy's default (every axis between the batch and the
  heads), ``dtype`` legacy's default float32 where linen passes None.
  """
  def attention(query, key, value, mask=None, dropout_rng=None,
                dropout_rate=0., broadcast_dropout=True, deterministic=False,
                dtype=None, precision=None):
    if dtype is None:
      dtype = jnp.float32
    bias = None
    if mask is not None:
      bias = jnp.where(mask, jnp.zeros((), dtype),
                       jnp.full((), -1e10, dtype)).astype(dtype)
    return fn(query, key, value, dtype=dtype,
              axis=tuple(range(1, query.ndim - 2)), bias=bias,
              precision=precision, dropout_rng=dropout_rng,
              dropout_rate=dropout_rate, broadcast_dropout=broadcast_dropout,
              deterministic=deterministic)
  attention.__name__ = getattr(fn, '__name__', 'attention')
  # (no __wrapped__: linen reads this function's own signature to choose
  # the keywords it passes)
  attention.legacy_attention_fn = fn
  return attention


def legacy_dot_product_attention(query, key, value, dtype=jnp.float32,
                                 bias=None, axis=None, broadcast_dropout=True,
                                 dropout_rng=None, dropout_rate=0.,
                                 deterministic=False, precision=None):
  """Legacy ``nn.attention.dot_product_attention``, with its interface.

  ``query`` / ``key`` / ``value``: ``[batch, dims..., heads, depth]``;
  the softmax runs jointly over the attention ``axis`` (default: every
  axis between the batch and the heads), ``bias`` (legacy's additive mask)
  is added to the scaled logits.  Linen's ``dot_product_attention`` takes
  a boolean ``mask`` and attends over one axis; this keeps legacy's
  arguments for code that calls it, or hands it around as an
  ``attention_fn`` (``legacy_attention_fn`` adapts it to linen's
  attention).  Dropout needs ``dropout_rng`` (legacy drew one from its
  implicit stream).
  """
  if key.shape[:-1] != value.shape[:-1]:
    raise ValueError(f'key {key.shape} and value {value.shape} differ before '
                     'the last axis')
  if query.shape[:1] != key.shape[:1] or query.shape[-1] != key.shape[-1]:
    raise ValueError(f'query {query.shape} and key {key.shape}: batch and '
                     'depth must agree')
  if not query.ndim == key.ndim == value.ndim:
    raise ValueError('query, key and value must have the same rank')
  n = query.ndim
  if axis is None:
    axis = tuple(range(1, n - 2))
  elif isinstance(axis, int):
    axis = (axis,)
  axis = tuple(axis)
  if not all(n >= 3 and 1 <= a < n - 2 for a in axis):
    raise ValueError('Attention axis must be between the batch axis and the '
                     'last-two axes.')
  rest = tuple(a for a in range(n - 1) if a not in axis)  # batch.., heads
  nb, na = len(rest), len(axis)
  order = rest + axis + (n - 1,)
  q = jnp.transpose(query, order)
  k = jnp.transpose(key, order)
  v = jnp.transpose(value, rest + (n - 1,) + axis)
  q = q / jnp.sqrt(query.shape[-1]).astype(dtype)
  batch_dims = tuple(range(nb))
  # [rest..., q positions..., k positions...]
  logits = lax.dot_general(q, k, (((q.ndim - 1,), (k.ndim - 1,)),
                                  (batch_dims, batch_dims)),
                           precision=precision)
  if bias is not None:
    logits = logits + bias
  kdims = tuple(range(logits.ndim - na, logits.ndim))
  weights = jax.nn.softmax(logits, axis=kdims).astype(dtype)
  if not deterministic and dropout_rate > 0.:
    if dropout_rng is None:
      raise ValueError('legacy_dot_product_attention: dropout needs '
                       'dropout_rng (legacy drew it from nn.make_rng())')
    keep_prob = 1.0 - dropout_rate
    shape = weights.shape
    if broadcast_dropout:
      shape = (1,) * nb + shape[nb:]
    keep = jax.random.bernoulli(dropout_rng, keep_prob, shape)
    weights = weights * (keep.astype(weights.dtype)
                         / jnp.asarray(keep_prob, dtype=dtype))
  # contract the key positions with value's trailing axes:
  # [rest..., q positions..., depth]
  out = lax.dot_general(weights, v, ((kdims, tuple(range(v.ndim - na,
                                                          v.ndim))),
                                     (batch_dims, batch_dims)),
                        precision=precision)
  inverse = [0] * n
  for i, a in enumerate(order):
    inverse[a] = i
  return jnp.transpose(out, inverse)


def _legacy_mask_axes(attention_axis, ndim):
  """The attention axes the legacy mask builders took: a tuple (default:
  every axis between the batch and the heads), each of them there."""
  if attention_axis is None:
    attention_axis = tuple(range(1, ndim - 2))
  if not isinstance(attention_axis, tuple):
    raise TypeError(f'attention_axis must be a tuple, got {attention_axis!r}')
  for ax in attention_axis:
    if not (ndim >= 3 and 1 <= ax < ndim - 2):
      raise ValueError('Attention axis must be between the batch axis and '
                       'the last-two axes.')
  return attention_axis


def legacy_make_padding_mask(padding_mask_query, padding_mask_key,
                             query_shape, key_shape, attention_axis=None,
                             segmentation_mask=False):
  """Legacy ``nn.attention.make_padding_mask``, with its interface.

  The pairwise mask of a query and a key padding mask (``[batch, axes...]``,
  a trailing 1 allowed), float32 of shape ``[batch, 1, q axes..., k
  axes...]``: the product of the two (or, with ``segmentation_mask``, their
  equality: segment ids).  With several attention axes the key's come out
  in reversed order, as legacy's did.  Code that assembled legacy
  attention by hand (its own ``MultiHeadDotProductAttention``) calls it.
  """
  if query_shape[0] != key_shape[0]:
    raise ValueError(f'query {tuple(query_shape)} and key '
                     f'{tuple(key_shape)}: batch sizes differ')
  if len(query_shape) != len(key_shape):
    raise ValueError(f'query {tuple(query_shape)} and key '
                     f'{tuple(key_shape)}: ranks differ')
  axes = _legacy_mask_axes(attention_axis, len(key_shape))
  shape = ((query_shape[0], 1) + tuple(query_shape[a] for a in axes)
           + tuple(key_shape[a] for a in axes))
  q = padding_mask_query[..., None]
  k = padding_mask_key[..., None]
  # batch first, the rest reversed: [batch, 1, k axes reversed...]
  k = jnp.transpose(k, (0,) + tuple(range(k.ndim - 1, 0, -1)))
  pairs = jnp.equal(q, k) if segmentation_mask else jnp.multiply(q, k)
  return lax.convert_element_type(pairs.reshape(shape), jnp.float32)


def legacy_make_causal_mask(key, attention_axis=None, self_mask=False):
  """Legacy ``nn.attention._make_causal_mask``, with its interface.

  A boolean mask, True where the query position may see the key position:
  positions are counted row-major over the attention axes, and the query's
  must be at least the key's (strictly greater with ``self_mask``).  Shape
  ``(1,) * (key.ndim - len(axes) - 1) + attention dims + attention dims``.
  """
  axes = _legacy_mask_axes(attention_axis, key.ndim)
  dims = tuple(key.shape[a] for a in axes)
  size = 1
  for d in dims:
    size *= d
  pos = jnp.arange(size, dtype=jnp.int32)
  shift = -1 if self_mask else 0
  seen = lax.ge(lax.broadcast_in_dim(pos, (size, size), (0,)) + shift,
                lax.broadcast_in_dim(pos, (size, size), (1,)))
  return seen.reshape((1,) * (key.ndim - len(axes) - 1) + dims + dims)
