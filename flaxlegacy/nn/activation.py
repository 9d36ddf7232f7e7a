"""Legacy ``flax.nn.activation``: re-exports of ``jax.nn`` (and ``jnp.tanh``).

Every name is the ``jax.nn`` function legacy Flax re-exported, unchanged
(``selu hard_tanh relu6 hard_sigmoid hard_swish`` since v0.2.2, ``silu`` since
0.3.0).  The one exception is ``normalize``: JAX removed ``jax.nn.normalize``
and its successor ``jax.nn.standardize`` clips the variance at 0, which the
2020 function did not, so the legacy formula is written out below.
"""

# pylint: disable=unused-import
from jax import lax
from jax.nn import celu
from jax.nn import elu
from jax.nn import gelu
from jax.nn import glu
from jax.nn import hard_sigmoid
from jax.nn import hard_swish
from jax.nn import hard_tanh
from jax.nn import leaky_relu
from jax.nn import log_sigmoid
from jax.nn import log_softmax
from jax.nn import relu
from jax.nn import relu6
from jax.nn import selu
from jax.nn import sigmoid
from jax.nn import silu
from jax.nn import soft_sign
from jax.nn import softmax
from jax.nn import softplus
from jax.nn import swish
import jax.numpy as jnp
from jax.numpy import tanh


def normalize(x, axis=-1, mean=None, variance=None, epsilon=1e-5):
  """Legacy ``jax.nn.normalize``: ``(x - mean) * rsqrt(variance + epsilon)``.

  The defaults are the mean and ``E[x^2] - E[x]^2`` over ``axis`` (kept dims),
  unclipped: ``jax.nn.standardize`` clips that variance at 0 and so differs
  where rounding makes it negative.
  """
  if mean is None:
    mean = jnp.mean(x, axis, keepdims=True)
  if variance is None:
    variance = jnp.mean(jnp.square(x), axis, keepdims=True) - jnp.square(mean)
  return (x - mean) * lax.rsqrt(variance + epsilon)
