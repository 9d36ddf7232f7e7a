"""Early-linen models whose initializers state their own dtype, under x64.

A 2021 physics library (jVMC) turned on ``jax_enable_x64`` at import and
built its layers as ``nn.Dense(n, dtype=np.float64, kernel_init=
jax.nn.initializers.lecun_normal(dtype=np.float64), bias_init=
functools.partial(jax.nn.initializers.zeros, dtype=np.float64))``.  flax
0.3.6 called ``kernel_init(key, shape)``, so the kernel was float64; its
parameter updates were ``jax.tree_util.tree_multimap(jax.lax.add, params,
delta)`` with a float64 ``delta``.

Importing this module enables x64 (as the library did), so it runs in a
process of its own: ``record_flax036.py --x64`` under the oracle, and
tests/test_early_linen.py in a fresh interpreter.  ``record()`` returns
every variable, output and updated parameter by name.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn

jax.config.update('jax_enable_x64', True)

tReal = np.float64  # pylint: disable=invalid-name
tCpx = np.complex128  # pylint: disable=invalid-name


class RBM(nn.Module):
  """Restricted Boltzmann machine with real parameters (the library's)."""
  numHidden: int = 2  # pylint: disable=invalid-name
  bias: bool = True

  @nn.compact
  def __call__(self, s):
    layer = nn.Dense(
        self.numHidden, use_bias=self.bias, dtype=tReal,
        kernel_init=jax.nn.initializers.lecun_normal(dtype=tReal),
        bias_init=functools.partial(jax.nn.initializers.zeros, dtype=tReal))
    return jnp.sum(jnp.log(jnp.cosh(layer(2 * s - 1))))


class CpxDense(nn.Module):
  """A complex layer whose initializer was built with a complex dtype."""

  @nn.compact
  def __call__(self, s):
    layer = nn.Dense(
        3, dtype=tCpx,
        kernel_init=jax.nn.initializers.variance_scaling(
            1.0, 'fan_in', 'normal', dtype=tCpx),
        bias_init=functools.partial(jax.nn.initializers.zeros, dtype=tCpx))
    return jnp.sum(layer(2 * s - 1))


# name -> (module, the dtype of its parameters' updates)
MODELS = {'rbm': (RBM, tReal), 'cpx_dense': (CpxDense, tCpx)}


def _leaves(tree, prefix, out):
  for key in sorted(tree):
    value = tree[key]
    if hasattr(value, 'keys'):
      _leaves(value, prefix + (key,), out)
    else:
      out['/'.join(prefix + (key,))] = np.asarray(value)


def record():
  """{'<model>:params/<path>', '<model>:out', '<model>:updated/<path>'}."""
  s = jnp.array([0, 1, 1, 0], dtype=np.int32)
  out = {}
  for name, (module, step_dtype) in MODELS.items():
    variables = module().init(jax.random.PRNGKey(0), s)
    params = variables['params']
    found = {}
    _leaves(variables, (), found)
    found['out'] = np.asarray(module().apply(variables, s))
    # the library's parameter update: a step of its dtype, leaf by leaf
    delta = jax.tree_util.tree_map(
        lambda p, dt=step_dtype: jnp.full(p.shape, 1e-5, dtype=dt), params)
    updated = jax.tree_util.tree_map(jax.lax.add, params, delta)
    _leaves(updated, ('updated',), found)
    found['updated_out'] = np.asarray(module().apply({'params': updated}, s))
    out.update({f'{name}:{k}': v for k, v in found.items()})
  return out
