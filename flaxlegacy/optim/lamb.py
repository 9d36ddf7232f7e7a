"""Legacy ``flax.optim.lamb``: Adam moments, then a layer-wise trust ratio.

``u = m^/(sqrt(v^) + eps) (+ wd p if wd != 0)``,
``p' = p - (|p|/|u|) lr u``.  optax: ``scale_by_adam``,
``add_decayed_weights``, ours ``scale_by_legacy_trust_ratio`` (optax's ratio
differs for zero norms: legacy never moves a zero-initialised leaf, spec
§7.6), ``scale_by_learning_rate``.
"""

from typing import Any

from flax import struct
import optax

from flaxlegacy.migrate import legacy_optax
from flaxlegacy.optim.base import OptaxOptimizerDef


@struct.dataclass
class _LAMBHyperParams:
  learning_rate: Any
  beta1: Any
  beta2: Any
  weight_decay: Any
  eps: Any


@struct.dataclass
class _LAMBParamState:
  grad_ema: Any
  grad_sq_ema: Any


class LAMB(OptaxOptimizerDef):
  """Layer-wise adaptive moments optimizer (note: weight_decay before eps)."""

  param_state_cls = _LAMBParamState

  def __init__(self, learning_rate=None, beta1=0.9, beta2=0.999,
               weight_decay=0, eps=1e-6):
    super().__init__(
        _LAMBHyperParams(learning_rate, beta1, beta2, weight_decay, eps))

  def _has_decay(self, hp):
    return hp.weight_decay != 0.0  # a Python branch in legacy too

  def transform(self, hp):
    return legacy_optax._lamb(hp.learning_rate, hp.beta1, hp.beta2,  # pylint: disable=protected-access
                              hp.weight_decay, hp.eps)

  def state_to_optax(self, hp, count, fields):
    decay = (optax.EmptyState(),) if self._has_decay(hp) else ()
    return (optax.ScaleByAdamState(count=count, mu=fields['grad_ema'],
                                   nu=fields['grad_sq_ema']),
            *decay, optax.EmptyState(), optax.EmptyState())

  def state_from_optax(self, hp, opt_state, fields):
    return {'grad_ema': opt_state[0].mu, 'grad_sq_ema': opt_state[0].nu}
