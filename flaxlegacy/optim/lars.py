"""Legacy ``flax.optim.lars``: layer-wise adaptive rate scaling.

``r = tc |p| / (|g| + wd |p| + eps)`` (1 if ``|g|`` or ``|p|`` is 0),
``s = lr r (g + wd p)``, ``m' = beta m + s``,
``p' = p - (s + beta m' if nesterov else m')``; the momentum buffer holds
the learning rate.  With ``wd == 0`` the ratio is optax's
``scale_by_trust_ratio``; with decay it is ours
(``scale_by_legacy_lars_trust_ratio``: optax's ratio uses ``|g + wd p|``,
spec §7.7).  Then ``scale(lr)``, ``trace`` (= legacy ``momentum``) and
``scale(-1)``.
"""

from typing import Any

from flax import struct
import optax

from flaxlegacy.migrate import legacy_optax
from flaxlegacy.optim.base import OptaxOptimizerDef


@struct.dataclass
class _LARSHyperParams:
  learning_rate: Any
  beta: Any
  weight_decay: Any
  trust_coefficient: Any
  eps: Any
  nesterov: bool


@struct.dataclass
class _LARSParamState:
  momentum: Any


class LARS(OptaxOptimizerDef):
  """LARS optimizer (You et al. 2017)."""

  param_state_cls = _LARSParamState

  def __init__(self, learning_rate=None, beta=0.9, weight_decay=0,
               trust_coefficient=0.001, eps=0, nesterov=False):
    super().__init__(_LARSHyperParams(learning_rate, beta, weight_decay,
                                      trust_coefficient, eps, nesterov))

  def transform(self, hp):
    return legacy_optax._lars(hp.learning_rate, hp.beta, hp.weight_decay,  # pylint: disable=protected-access
                              hp.trust_coefficient, hp.eps, hp.nesterov)

  def state_to_optax(self, hp, count, fields):
    return (optax.EmptyState(), optax.EmptyState(),
            optax.TraceState(trace=fields['momentum']), optax.EmptyState())

  def state_from_optax(self, hp, opt_state, fields):
    return {'momentum': opt_state[2].trace}
