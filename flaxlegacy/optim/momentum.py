"""Legacy ``flax.optim.momentum``: heavy-ball / Nesterov momentum.

``g~ = g + wd p`` (only if ``wd != 0``), ``m' = beta m + g~``,
``p' = p - lr (g~ + beta m' if nesterov else m')``.
optax: ``add_decayed_weights``, ``trace``, ``scale_by_learning_rate``
(bit-identical, spec §7.2); ``TraceState.trace`` is legacy's ``momentum``.
"""

from typing import Any

from flax import struct
import optax

from flaxlegacy.migrate import legacy_optax
from flaxlegacy.optim.base import OptaxOptimizerDef


@struct.dataclass
class _MomentumHyperParams:
  learning_rate: Any
  beta: Any
  weight_decay: Any
  nesterov: bool


@struct.dataclass
class _MomentumParamState:
  momentum: Any


class Momentum(OptaxOptimizerDef):
  """Momentum optimizer (momentum buffer without the learning rate)."""

  host_inputs_to_jax = ()
  param_state_cls = _MomentumParamState

  def __init__(self, learning_rate=None, beta=0.9, weight_decay=0,
               nesterov=False):
    super().__init__(
        _MomentumHyperParams(learning_rate, beta, weight_decay, nesterov))

  def transform(self, hp):
    # Legacy branched in Python on weight_decay (a traced override fails,
    # as it did in legacy).
    return legacy_optax._momentum(hp.learning_rate, hp.beta,  # pylint: disable=protected-access
                                  hp.weight_decay, hp.nesterov)

  def _has_decay(self, hp):
    return hp.weight_decay != 0

  def state_to_optax(self, hp, count, fields):
    decay = (optax.EmptyState(),) if self._has_decay(hp) else ()
    return decay + (optax.TraceState(trace=fields['momentum']),
                    optax.EmptyState())

  def state_from_optax(self, hp, opt_state, fields):
    return {'momentum': opt_state[-2].trace}
