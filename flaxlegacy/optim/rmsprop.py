"""Legacy ``flax.optim.rmsprop`` (0.3.0+ signature, Decision D11).

``v' = b2 v + (1 - b2) g^2``; centered: ``mg' = b2 mg + (1 - b2) g``,
``v~ = v' - mg'^2``; ``p' = p - lr g / (sqrt(v~) + eps)``.
optax: ``scale_by_rms`` / ``scale_by_stddev`` with ``eps_in_sqrt=False``
and ``scale_by_learning_rate`` (rounding-level, spec §7.5).  ``mg`` is
``None`` unless centered; a v0.2 state dict without ``mg`` restores into a
template whose ``mg`` is ``None``.
"""

from typing import Any

from flax import serialization
from flax import struct
import optax

from flaxlegacy.optim.base import OptaxOptimizerDef


@struct.dataclass
class _RMSPropHyperParams:
  learning_rate: Any
  beta2: Any
  eps: Any
  centered: bool = False  # v0.2 - v0.2.2 had three fields


@struct.dataclass
class _RMSPropParamState:
  v: Any
  mg: Any = None  # v0.2 - v0.2.2 had only ``v``


def _rmsprop_state_dict(state):
  return {'v': serialization.to_state_dict(state.v),
          'mg': serialization.to_state_dict(state.mg)}


def _rmsprop_from_state_dict(target, state_dict):
  v = serialization.from_state_dict(target.v, state_dict['v'])
  if 'mg' not in state_dict and target.mg is None:
    return target.replace(v=v)  # a v0.2 - v0.2.2 checkpoint
  mg = serialization.from_state_dict(target.mg, state_dict['mg'])
  return target.replace(v=v, mg=mg)


serialization.register_serialization_state(
    _RMSPropParamState, _rmsprop_state_dict, _rmsprop_from_state_dict,
    override=True)


class RMSProp(OptaxOptimizerDef):
  """RMSProp optimizer (eps outside the root, no momentum)."""

  param_state_cls = _RMSPropParamState

  def __init__(self, learning_rate=None, beta2=0.9, eps=1e-8,
               centered=False):
    super().__init__(_RMSPropHyperParams(learning_rate, beta2, eps, centered))

  def transform(self, hp):
    scale = optax.scale_by_stddev if hp.centered else optax.scale_by_rms
    return optax.chain(
        scale(decay=hp.beta2, eps=hp.eps, initial_scale=0.,
              eps_in_sqrt=False),
        optax.scale_by_learning_rate(hp.learning_rate))

  def state_to_optax(self, hp, count, fields):
    if hp.centered:
      rms = optax.ScaleByRStdDevState(mu=fields['mg'], nu=fields['v'])
    else:
      rms = optax.ScaleByRmsState(nu=fields['v'])
    return (rms, optax.EmptyState())

  def state_from_optax(self, hp, opt_state, fields):
    rms = opt_state[0]
    if hp.centered:
      return {'v': rms.nu, 'mg': rms.mu}
    # Not centered: mg is carried through unchanged (None after init).
    return {'v': rms.nu, 'mg': None if fields is None else fields['mg']}
