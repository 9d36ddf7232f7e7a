"""Legacy ``flax.nn.normalization``: BatchNorm, LayerNorm, GroupNorm.

These three are written out here rather than delegated to linen, because
linen computes a different function in ways users' numbers can see:

* legacy takes the variance as ``E[x^2] - E[x]^2`` *unclipped*; linen clips it
  at 0 (legacy yields NaN where rounding makes it negative, e.g. a feature that
  is constant over the batch);
* legacy always normalises in float32 and casts the result to ``dtype``
  (default float32, so bf16 inputs give float32 outputs), and LayerNorm casts
  ``scale``/``bias`` to ``dtype`` before using them;
* GroupNorm's ``scale``/``bias`` have shape ``(1, ..., 1, C)`` (linen: ``(C,)``);
* BatchNorm keeps its running statistics in the legacy ``nn.stateful``
  Collection (or ``batch_stats``), keyed by module path, and does not update
  them during init.

Each apply is the legacy sequence of operations (the same ones linen runs,
minus the clip), so under jit it costs what the linen layer costs.
"""

from jax import lax
import jax.numpy as jnp

from flaxlegacy.nn import _layer_util
from flaxlegacy.nn import base
from flaxlegacy.nn import initializers


# Legacy private helpers, kept for code that imported them.
def _no_init(rng, shape):  # pylint: disable=unused-argument
  """Initializer of an absent parameter: an empty tuple."""
  return ()


def _absolute_dims(rank, dims):
  """``dims`` with negative entries counted from the end of a rank-``rank``
  shape, as a tuple."""
  return tuple(rank + d if d < 0 else d for d in dims)


def _moments(x, axes, keepdims):
  """Mean and unclipped ``E[x^2] - E[x]^2`` over ``axes``."""
  mean = jnp.mean(x, axis=axes, keepdims=keepdims)
  mean2 = jnp.mean(lax.square(x), axis=axes, keepdims=keepdims)
  return mean, mean2 - lax.square(mean)


class BatchNorm(base.Module):
  """BatchNorm Module."""

  def apply(self,
            x,
            batch_stats=None,
            use_running_average=False,
            axis=-1,
            momentum=0.99,
            epsilon=1e-5,
            dtype=jnp.float32,
            bias=True,
            scale=True,
            bias_init=initializers.zeros,
            scale_init=initializers.ones,
            axis_name=None,
            axis_index_groups=None):
    """Normalizes ``x`` with batch statistics (or their running averages).

    Args:
      x: the input.
      batch_stats: a ``nn.Collection`` holding the running averages (default:
        the ``nn.stateful`` collection, if any).
      use_running_average: normalise with the stored averages instead of the
        statistics of ``x``.
      axis: feature axis or tuple of feature axes.
      momentum: decay of the running averages.
      epsilon: added to the variance.
      dtype: dtype of the result (the computation is float32).
      bias: add the learned ``bias``.
      scale: multiply by the learned ``scale``.
      bias_init: initializer of ``bias``.
      scale_init: initializer of ``scale``.
      axis_name: ``pmap`` axis over which batch statistics are averaged.
      axis_index_groups: device groups for that average (see ``lax.psum``).
    Returns:
      The normalized input, in ``dtype``.
    """
    x = jnp.asarray(x, jnp.float32)
    axis = axis if isinstance(axis, (tuple, list)) else (axis,)
    axis = tuple(ax + x.ndim if ax < 0 else ax for ax in axis)
    feature_shape = tuple(d if i in axis else 1 for i, d in enumerate(x.shape))
    stats_shape = tuple(d for i, d in enumerate(x.shape) if i in axis)
    reduction_axes = tuple(i for i in range(x.ndim) if i not in axis)

    # The state handles must be created before the parameters: in init mode
    # they split the frame key, which the parameter keys are derived from.
    if self.is_stateful() or batch_stats is not None:
      ra_mean = self.state('mean', stats_shape, initializers.zeros,
                           collection=batch_stats)
      ra_var = self.state('var', stats_shape, initializers.ones,
                          collection=batch_stats)
    else:
      ra_mean = ra_var = None

    if use_running_average:
      if ra_mean is None:
        raise _layer_util.layer_error(
            self, ValueError, 'when use_running_averages is True '
            'either use a stateful context or provide batch_stats')
      mean, var = ra_mean.value, ra_var.value
    else:
      initializing = self.is_initializing()
      # The operations of linen's _compute_stats / _normalize, in their
      # order, minus the clip.  The values do not depend on the order, XLA's
      # fusion does: legacy's order (mean first, reshapes, rsqrt before the
      # reshape) made XLA fuse a ResNet's BatchNorm gradients differently,
      # +2.5% bytes accessed in its cost model (docs/benchmarks.md).
      square = lax.square(x)
      mean = x.mean(reduction_axes)
      mean2 = square.mean(reduction_axes)
      if axis_name is not None and not initializing:
        # One collective for both moments, as legacy (and linen) do.
        moments = lax.pmean(jnp.stack([mean, mean2]), axis_name=axis_name,
                            axis_index_groups=axis_index_groups)
        mean, mean2 = moments[0], moments[1]
      var = mean2 - lax.square(mean)
      if ra_mean is not None and not initializing:
        ra_mean.value = momentum * ra_mean.value + (1 - momentum) * mean
        ra_var.value = momentum * ra_var.value + (1 - momentum) * var

    mean = jnp.expand_dims(mean, reduction_axes)
    var = jnp.expand_dims(var, reduction_axes)
    y = x - mean
    mul = lax.rsqrt(var + epsilon)
    if scale:
      mul = mul * self.param('scale', stats_shape,
                             scale_init).reshape(feature_shape)
    y = y * mul
    if bias:
      y = y + self.param('bias', stats_shape, bias_init).reshape(feature_shape)
    return jnp.asarray(y, dtype)


class LayerNorm(base.Module):
  """Layer normalization over the last axis (arxiv.org/abs/1607.06450)."""

  def apply(self,
            x,
            epsilon=1e-6,
            dtype=jnp.float32,
            bias=True,
            scale=True,
            bias_init=initializers.zeros,
            scale_init=initializers.ones):
    """Normalizes each example over its last axis.

    Args:
      x: the input.
      epsilon: added to the variance.
      dtype: dtype of the result; ``scale``/``bias`` are cast to it.
      bias: add the learned ``bias``.
      scale: multiply by the learned ``scale``.
      bias_init: initializer of ``bias``.
      scale_init: initializer of ``scale``.
    Returns:
      The normalized input, in ``dtype``.
    """
    x = jnp.asarray(x, jnp.float32)
    features = x.shape[-1]
    mean, var = _moments(x, -1, keepdims=True)
    mul = lax.rsqrt(var + epsilon)
    if scale:
      mul = mul * jnp.asarray(
          self.param('scale', (features,), scale_init), dtype)
    y = (x - mean) * mul
    if bias:
      y = y + jnp.asarray(self.param('bias', (features,), bias_init), dtype)
    return jnp.asarray(y, dtype)


class GroupNorm(base.Module):
  """Group normalization (arxiv.org/abs/1803.08494)."""

  def apply(self,
            x,
            num_groups=32,
            group_size=None,
            epsilon=1e-6,
            dtype=jnp.float32,
            bias=True,
            scale=True,
            bias_init=initializers.zeros,
            scale_init=initializers.ones):
    """Normalizes over groups of channels (and all non-batch axes).

    Args:
      x: the input ``(batch, ..., channels)``.
      num_groups: number of channel groups (pass ``None`` to use
        ``group_size``).
      group_size: number of channels per group.
      epsilon: added to the variance.
      dtype: dtype of the result.
      bias: add the learned ``bias`` (shape ``(1, ..., 1, channels)``).
      scale: multiply by the learned ``scale`` (same shape).
      bias_init: initializer of ``bias``.
      scale_init: initializer of ``scale``.
    Returns:
      The normalized input, in ``dtype``.
    """
    x = jnp.asarray(x, jnp.float32)
    if (num_groups is None) == (group_size is None):
      raise _layer_util.layer_error(
          self, ValueError, 'Either `num_groups` or `group_size` should be '
          'specified, but not both of them.')
    input_shape = x.shape
    channels = input_shape[-1]
    if group_size is not None:
      if channels % group_size != 0:
        raise _layer_util.layer_error(
            self, ValueError, 'Number of channels ({}) is not multiple of the '
            'group size ({}).'.format(channels, group_size))
      num_groups = channels // group_size
    elif channels % num_groups != 0:
      # Legacy let the reshape below fail; say what is wrong instead.
      raise _layer_util.layer_error(
          self, ValueError, f'Number of channels ({channels}) is not multiple '
          f'of the number of groups ({num_groups}).')
    x = x.reshape(input_shape[:-1] + (num_groups, channels // num_groups))
    reduction_axes = tuple(range(1, x.ndim - 2)) + (x.ndim - 1,)
    mean, var = _moments(x, reduction_axes, keepdims=True)
    x = ((x - mean) * lax.rsqrt(var + epsilon)).reshape(input_shape)
    feature_shape = (1,) * (len(input_shape) - 1) + (channels,)
    if scale:
      x = x * self.param('scale', feature_shape, scale_init)
    if bias:
      x = x + self.param('bias', feature_shape, bias_init)
    return x.astype(dtype)
