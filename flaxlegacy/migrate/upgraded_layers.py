"""Linen layers that ``flaxlegacy upgrade`` writes where no argument of the
linen layer restores legacy parameters or numbers.

Plain ``flax.linen`` and ``jax.numpy``: importable and usable with
``FLAXLEGACY=off`` (the upgraded code needs nothing else from flaxlegacy).

* ``GroupNorm``: legacy Flax stored ``scale`` and ``bias`` with the rank of
  the input, ``(1, ..., 1, C)``; linen's ``GroupNorm`` stores ``(C,)`` (spec
  legacy-nn.md §3.10), so a legacy checkpoint would not load into it.  This
  one keeps the legacy shapes and the legacy computation (float32
  statistics, the unclipped ``E[x^2] - E[x]^2``) and raises legacy's errors.
* ``legacy_initializer``: an initializer as flax 0.3 linen called it,
  ``init(key, shape)``; today's layers pass their ``param_dtype`` as a third
  argument, which such an initializer cannot take (or, a ``functools.partial``
  binding ``dtype=``, takes twice).
* ``conv_dimension_numbers`` / ``absolute_dims``: legacy's private helpers
  ``nn.linear._conv_dimension_numbers`` and
  ``nn.normalization._absolute_dims``, which research code built custom
  convolutions and normalizations on; linen has no ``_absolute_dims``, and
  its private names may change without notice.
"""

from typing import Any, Callable, Optional, Sequence

from flax import linen as nn
import jax.numpy as jnp
from jax import lax


class GroupNorm(nn.Module):
  """Legacy ``flax.nn.GroupNorm`` as a linen module (legacy parameter shapes).

  Attributes: as linen's ``GroupNorm`` (``use_bias`` / ``use_scale`` are
  legacy's ``bias`` / ``scale``); ``num_groups=None`` with ``group_size``
  set groups by size.
  """
  num_groups: Optional[int] = 32
  group_size: Optional[int] = None
  epsilon: float = 1e-6
  dtype: Any = jnp.float32
  use_bias: bool = True
  use_scale: bool = True
  bias_init: Callable[..., Any] = nn.initializers.zeros
  scale_init: Callable[..., Any] = nn.initializers.ones

  @nn.compact
  def __call__(self, x):
    x = jnp.asarray(x, jnp.float32)
    if (self.num_groups is None) == (self.group_size is None):
      raise ValueError('Either `num_groups` or `group_size` should be '
                       'specified, but not both of them.')
    shape = x.shape
    channels = shape[-1]
    num_groups = self.num_groups
    if self.group_size is not None:
      if channels % self.group_size != 0:
        raise ValueError(f'Number of channels ({channels}) is not multiple of '
                         f'the group size ({self.group_size}).')
      num_groups = channels // self.group_size
    elif channels % num_groups != 0:
      raise ValueError(f'Number of channels ({channels}) is not multiple of '
                       f'the number of groups ({num_groups}).')
    g = x.reshape(shape[:-1] + (num_groups, channels // num_groups))
    axes = tuple(range(1, g.ndim - 2)) + (g.ndim - 1,)
    mean = jnp.mean(g, axis=axes, keepdims=True)
    var = jnp.mean(lax.square(g), axis=axes, keepdims=True) - lax.square(mean)
    y = ((g - mean) * lax.rsqrt(var + self.epsilon)).reshape(shape)
    param_shape = (1,) * (len(shape) - 1) + (channels,)
    if self.use_scale:
      y = y * self.param('scale', self.scale_init, param_shape)
    if self.use_bias:
      y = y + self.param('bias', self.bias_init, param_shape)
    return y.astype(self.dtype)


def conv_dimension_numbers(input_shape: Sequence[int]):
  """Channels-last ``lax.ConvDimensionNumbers`` for an input of this shape.

  Input ``(batch, spatial..., features)``, kernel ``(spatial...,
  in_features, out_features)``, output laid out like the input (legacy
  ``nn.linear._conv_dimension_numbers``).
  """
  rank = len(input_shape)
  spatial = tuple(range(1, rank - 1))
  lhs = (0, rank - 1) + spatial
  rhs = (rank - 1, rank - 2) + tuple(range(rank - 2))
  return lax.ConvDimensionNumbers(lhs, rhs, lhs)


def absolute_dims(rank: int, dims: Sequence[int]):
  """``dims`` with negative entries counted from the end of a rank-``rank``
  shape, as a tuple (legacy ``nn.normalization._absolute_dims``)."""
  return tuple(rank + d if d < 0 else d for d in dims)


def legacy_initializer(init):
  """``init`` called as flax 0.3 linen called it: ``init(key, shape)``.

  Today's linen layers call ``kernel_init(key, shape, param_dtype)``; the
  result ignores that dtype, so an initializer written for flax 0.3 (no
  dtype parameter, or a ``functools.partial`` that binds ``dtype=``) gives
  the parameters it gave then, with their dtype.
  """

  def initializer(key, shape, dtype=None):  # pylint: disable=unused-argument
    return init(key, shape)

  initializer.legacy_initializer = init
  return initializer
