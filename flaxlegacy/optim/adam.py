"""Legacy ``flax.optim.adam``: Adam with decoupled weight decay times lr.

``p' = p - lr m^/(sqrt(v^) + eps) - lr wd p`` with bias-corrected moments.
optax: ``scale_by_adam(eps_root=0)``, ``add_decayed_weights(wd)``,
``scale_by_learning_rate`` - the ``optax.adamw`` chain (rounding-level,
spec §7.3: optax evaluates ``lr (u + wd p)``); ``ScaleByAdamState`` holds
``grad_ema`` / ``grad_sq_ema`` as ``mu`` / ``nu`` and the step as ``count``.
"""

from typing import Any

from flax import struct
import optax

from flaxlegacy.optim.base import OptaxOptimizerDef


@struct.dataclass
class _AdamHyperParams:
  learning_rate: Any
  beta1: Any
  beta2: Any
  eps: Any
  weight_decay: Any


@struct.dataclass
class _AdamParamState:
  grad_ema: Any
  grad_sq_ema: Any


class Adam(OptaxOptimizerDef):
  """Adam optimizer (Kingma & Ba) with optional decoupled weight decay."""

  host_inputs_to_jax = ('grads',)
  param_state_cls = _AdamParamState

  def __init__(self, learning_rate=None, beta1=0.9, beta2=0.999, eps=1e-8,
               weight_decay=0.0):
    super().__init__(
        _AdamHyperParams(learning_rate, beta1, beta2, eps, weight_decay))

  def transform(self, hp):
    return optax.chain(
        optax.scale_by_adam(b1=hp.beta1, b2=hp.beta2, eps=hp.eps,
                            eps_root=0.0),
        optax.add_decayed_weights(hp.weight_decay),
        optax.scale_by_learning_rate(hp.learning_rate))

  def state_to_optax(self, hp, count, fields):
    return (optax.ScaleByAdamState(count=count, mu=fields['grad_ema'],
                                   nu=fields['grad_sq_ema']),
            optax.EmptyState(), optax.EmptyState())

  def state_from_optax(self, hp, opt_state, fields):
    return {'grad_ema': opt_state[0].mu, 'grad_sq_ema': opt_state[0].nu}
