"""Linen layers that ``flaxlegacy upgrade`` writes where no argument of the
linen layer restores legacy parameters or numbers.

Plain ``flax.linen`` and ``jax.numpy``: importable and usable with
``FLAXLEGACY=off`` (the upgraded code needs nothing else from flaxlegacy).

* ``GroupNorm``: legacy Flax stored ``scale`` and ``bias`` with the rank of
  the input, ``(1, ..., 1, C)``; linen's ``GroupNorm`` stores ``(C,)`` (spec
  legacy-nn.md §3.10), so a legacy checkpoint would not load into it.  This
  one keeps the legacy shapes and the legacy computation (float32
  statistics, the unclipped ``E[x^2] - E[x]^2``) and raises legacy's errors.
"""

from typing import Any, Callable, Optional

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
