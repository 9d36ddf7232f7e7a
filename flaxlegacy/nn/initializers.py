"""Legacy ``flax.nn.initializers``: ``jax.nn.initializers`` with 2020 defaults.

Legacy Flax re-exported JAX's initializers.  Today's JAX functions draw the
same values from the same keys (with the legacy PRNG policy), but two things
moved, so each name here is a thin legacy-signature front for the JAX one:

* the default dtype is now "the default float type" -- float64 under
  ``jax_enable_x64`` -- where 2020 JAX said float32.  Legacy modules call
  initializers as ``init(key, shape)``, so legacy parameters were float32
  even with x64 on; the defaults below keep that;
* the factories gained arguments (``batch_axis`` before ``dtype``), so a
  legacy positional ``dtype`` would land elsewhere; the legacy signatures
  below keep the 2020 positional order.

``delta_orthogonal`` appeared in v0.2.2.  The arithmetic is JAX's.
"""

from jax.nn import initializers as _jax_init
import jax.numpy as jnp

_F32 = jnp.float32


def zeros(key, shape, dtype=_F32):
  """An array of zeros (an initializer, not a factory)."""
  return _jax_init.zeros(key, shape, dtype)


def ones(key, shape, dtype=_F32):
  """An array of ones (an initializer, not a factory)."""
  return _jax_init.ones(key, shape, dtype)


def uniform(scale=1e-2, dtype=_F32):
  """Initializer drawing from ``U[0, scale)``."""
  return _jax_init.uniform(scale, dtype=dtype)


def normal(stddev=1e-2, dtype=_F32):
  """Initializer drawing from ``N(0, stddev**2)``."""
  return _jax_init.normal(stddev, dtype=dtype)


def variance_scaling(scale, mode, distribution, in_axis=-2, out_axis=-1,
                     dtype=_F32):
  """Initializer with variance ``scale / fan`` (``fan_in|fan_out|fan_avg``)."""
  return _jax_init.variance_scaling(scale, mode, distribution, in_axis=in_axis,
                                    out_axis=out_axis, dtype=dtype)


def _variance_scaling_alias(name, scale, mode, distribution):
  def factory(in_axis=-2, out_axis=-1, dtype=_F32):
    return variance_scaling(scale, mode, distribution, in_axis, out_axis,
                            dtype)
  factory.__name__ = factory.__qualname__ = name
  factory.__doc__ = (f'``variance_scaling({scale}, {mode!r}, '
                     f'{distribution!r})``.')
  return factory


lecun_normal = _variance_scaling_alias('lecun_normal', 1.0, 'fan_in',
                                       'truncated_normal')
lecun_uniform = _variance_scaling_alias('lecun_uniform', 1.0, 'fan_in',
                                        'uniform')
xavier_normal = _variance_scaling_alias('xavier_normal', 1.0, 'fan_avg',
                                        'truncated_normal')
xavier_uniform = _variance_scaling_alias('xavier_uniform', 1.0, 'fan_avg',
                                         'uniform')
kaiming_normal = _variance_scaling_alias('kaiming_normal', 2.0, 'fan_in',
                                         'truncated_normal')
kaiming_uniform = _variance_scaling_alias('kaiming_uniform', 2.0, 'fan_in',
                                          'uniform')


def orthogonal(scale=1.0, column_axis=-1, dtype=_F32):
  """Initializer of (semi-)orthogonal matrices times ``scale``."""
  return _jax_init.orthogonal(scale, column_axis, dtype=dtype)


def delta_orthogonal(scale=1.0, column_axis=-1, dtype=_F32):
  """Initializer of delta-orthogonal convolution kernels (v0.2.2+)."""
  return _jax_init.delta_orthogonal(scale, column_axis, dtype=dtype)
