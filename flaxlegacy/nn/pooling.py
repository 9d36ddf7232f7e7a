"""Legacy ``flax.nn.pooling``: ``pool``, ``avg_pool``, ``max_pool``.

Delegated to ``flax.linen.pooling``, which has the legacy defaults (stride 1,
``'VALID'``), the 0.3.0+ spatial-only explicit padding, and counts padding as
zeros in the average.  The one legacy form linen lacks is v0.2's full-rank
explicit padding (a pair for the batch and feature axes too); it is reduced
to the spatial pairs here.
"""

from flax.linen import pooling as linen_pooling


def _spatial_padding(padding, window_shape):
  """Accepts v0.2 full-rank pads whose batch/feature pairs are zero."""
  if isinstance(padding, str):
    return padding
  padding = tuple(map(tuple, padding))
  if len(padding) == len(window_shape) + 2:
    if padding[0] != (0, 0) or padding[-1] != (0, 0):
      raise ValueError(
          f'padding {padding} pads the batch or feature axis; only the '
          f'spatial axes of window_shape {window_shape} can be padded')
    padding = padding[1:-1]
  return padding


def _canonical(window_shape, strides, padding):
  # Legacy required tuples (it concatenated them); sequences are accepted.
  window_shape = tuple(window_shape)
  strides = tuple(strides) if strides else None
  return window_shape, strides, _spatial_padding(padding, window_shape)


def pool(inputs, init, reduce_fn, window_shape, strides, padding):
  """Reduces each window of ``inputs`` with ``reduce_fn`` from ``init``.

  Args:
    inputs: ``(batch, window dims..., features)``.
    init: the initial value of the reduction.
    reduce_fn: a ``(T, T) -> T`` reduction such as ``lax.add``.
    window_shape: the window size per spatial dimension.
    strides: the stride per spatial dimension (default: ones).
    padding: ``'SAME'``, ``'VALID'`` or a ``(low, high)`` pair per spatial
      dimension.
  Returns:
    The reduction of every window.
  """
  window_shape, strides, padding = _canonical(window_shape, strides, padding)
  return linen_pooling.pool(inputs, init, reduce_fn, window_shape, strides,
                            padding)


def avg_pool(inputs, window_shape, strides=None, padding='VALID'):
  """Average over each window; padded positions count as zeros."""
  window_shape, strides, padding = _canonical(window_shape, strides, padding)
  return linen_pooling.avg_pool(inputs, window_shape, strides, padding,
                                count_include_pad=True)


def max_pool(inputs, window_shape, strides=None, padding='VALID'):
  """Maximum over each window."""
  window_shape, strides, padding = _canonical(window_shape, strides, padding)
  return linen_pooling.max_pool(inputs, window_shape, strides, padding)
