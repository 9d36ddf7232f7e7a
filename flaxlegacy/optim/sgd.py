"""Legacy ``flax.optim.sgd``: GradientDescent, ``p' = p - lr * g``.

optax: ``scale_by_learning_rate(lr)`` (bit-identical, spec §7.1).
"""

from typing import Any

from flax import struct
import optax

from flaxlegacy.optim.base import OptaxOptimizerDef


@struct.dataclass
class _GradientDescentHyperParams:
  learning_rate: Any


class GradientDescent(OptaxOptimizerDef):
  """Gradient descent; the per-parameter state is ``()``."""

  host_inputs_to_jax = ()
  param_state_cls = None

  def __init__(self, learning_rate=None):
    super().__init__(_GradientDescentHyperParams(learning_rate))

  def transform(self, hyper_params):
    return optax.scale_by_learning_rate(hyper_params.learning_rate)

  def state_to_optax(self, hyper_params, count, fields):
    return optax.EmptyState()

  def state_from_optax(self, hyper_params, opt_state, fields):
    return {}
