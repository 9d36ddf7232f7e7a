"""Legacy ``flax.optim.adabelief`` (v0.3.5+).

``m' = b1 m + (1 - b1) g``, ``s' = b2 s + (1 - b2) (g - m')^2 + eps``,
``p' = p - lr m^/(sqrt(s^) + eps) - lr wd p``.  optax:
``scale_by_belief(eps_root=eps)``, ``add_decayed_weights``,
``scale_by_learning_rate`` (rounding-level, spec §7.10).
"""

from typing import Any

from flax import struct
import optax

from flaxlegacy.migrate import legacy_optax
from flaxlegacy.optim.base import OptaxOptimizerDef


@struct.dataclass
class _AdaBeliefHyperParams:
  learning_rate: Any
  beta1: Any
  beta2: Any
  eps: Any
  weight_decay: Any


@struct.dataclass
class _AdaBeliefParamState:
  grad_ema: Any
  grad_sq_ema: Any


class AdaBelief(OptaxOptimizerDef):
  """AdaBelief optimizer (Zhuang et al. 2020)."""

  host_inputs_to_jax = ('grads',)
  param_state_cls = _AdaBeliefParamState

  def __init__(self, learning_rate=None, beta1=0.9, beta2=0.999, eps=1e-16,
               weight_decay=0.0):
    super().__init__(_AdaBeliefHyperParams(learning_rate, beta1, beta2, eps,
                                           weight_decay))

  def transform(self, hp):
    return legacy_optax._adabelief(hp.learning_rate, hp.beta1, hp.beta2,  # pylint: disable=protected-access
                                   hp.eps, hp.weight_decay)

  def state_to_optax(self, hp, count, fields):
    return (optax.ScaleByBeliefState(count=count, mu=fields['grad_ema'],
                                     nu=fields['grad_sq_ema']),
            optax.EmptyState(), optax.EmptyState())

  def state_from_optax(self, hp, opt_state, fields):
    return {'grad_ema': opt_state[0].mu, 'grad_sq_ema': opt_state[0].nu}
