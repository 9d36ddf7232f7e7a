"""Legacy ``flax.optim.adadelta`` (0.3.1+).

``a' = rho a + (1 - rho) g^2``, ``d = sqrt(D + eps) / sqrt(a' + eps) g``,
``p' = p - lr d - lr wd p``, ``D' = rho D + (1 - rho) d^2``.
optax: ``scale_by_adadelta``, ``add_decayed_weights`` (decoupled - the
``optax.adadelta`` alias decays before the scaling, a different function
when ``wd != 0``, spec §7.9), ``scale_by_learning_rate``.
"""

from typing import Any

from flax import struct
import optax

from flaxlegacy.migrate import legacy_optax
from flaxlegacy.optim.base import OptaxOptimizerDef


@struct.dataclass
class _AdadeltaHyperParams:
  learning_rate: Any
  rho: Any
  eps: Any
  weight_decay: Any


@struct.dataclass
class _AdadeltaParamState:
  sq_avg: Any
  acc_delta: Any


class Adadelta(OptaxOptimizerDef):
  """Adadelta optimizer (Zeiler 2012)."""

  param_state_cls = _AdadeltaParamState

  def __init__(self, learning_rate=None, rho=0.9, eps=1e-6,
               weight_decay=0.0):
    super().__init__(_AdadeltaHyperParams(learning_rate, rho, eps,
                                          weight_decay))

  def transform(self, hp):
    return legacy_optax._adadelta(hp.learning_rate, hp.rho, hp.eps,  # pylint: disable=protected-access
                                  hp.weight_decay)

  def state_to_optax(self, hp, count, fields):
    return (optax.ScaleByAdaDeltaState(e_g=fields['sq_avg'],
                                       e_x=fields['acc_delta']),
            optax.EmptyState(), optax.EmptyState())

  def state_from_optax(self, hp, opt_state, fields):
    return {'sq_avg': opt_state[0].e_g, 'acc_delta': opt_state[0].e_x}
