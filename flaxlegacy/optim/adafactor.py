"""Legacy ``flax.optim.adafactor`` (0.3.1+ signature).

optax's ``adafactor`` chain computes the legacy rule (bit-identical for
float32 under jit, spec §7.8); it is assembled here piece by piece because
the alias hard-codes ``epsilon2 = 1e-3`` and runs in the parameter dtype,
where legacy keeps its statistics in float32 (``in_float32``).  The
factoring decision, ``multiply_by_parameter_scale`` and ``dtype_momentum``
come from the constructor, the other hyper-parameters from each call, as in
legacy.  State: ``FactoredState`` holds ``v_row``/``v_col``/``v`` (and the
step as ``count``), ``EmaState.ema`` holds ``m``; unused slots are float32
``zeros((1,))``.
"""

from typing import Any, Optional

from flax import struct
import jax
import jax.numpy as jnp
import optax

from flaxlegacy.migrate import legacy_optax
from flaxlegacy.optim.base import OptaxOptimizerDef

# Legacy module-level type alias (annotations of ``dtype_momentum``).
Dtype = Any


@struct.dataclass
class _AdafactorHyperParams:
  learning_rate: Optional[float]
  factored: bool
  multiply_by_parameter_scale: bool
  beta1: Optional[float]
  decay_rate: float
  step_offset: int
  clipping_threshold: Optional[float]
  weight_decay_rate: Optional[float]
  min_dim_size_to_factor: int
  epsilon1: float
  epsilon2: float


@struct.dataclass
class _AdafactorParamState:
  v_row: Any  # factored second moment, rows
  v_col: Any  # factored second moment, columns
  v: Any  # unfactored second moment
  m: Any  # momentum (beta1 is not None)


def _placeholder(_):
  return jnp.zeros((1,), jnp.float32)


class Adafactor(OptaxOptimizerDef):
  """Adafactor optimizer (Shazeer & Stern 2018)."""

  param_state_cls = _AdafactorParamState

  def __init__(self, learning_rate=None, factored=True,
               multiply_by_parameter_scale=True, beta1=None, decay_rate=0.8,
               step_offset=0, clipping_threshold=1.0, weight_decay_rate=None,
               min_dim_size_to_factor=128, epsilon1=1e-30, epsilon2=1e-3,
               dtype_momentum=jnp.float32):
    super().__init__(_AdafactorHyperParams(
        learning_rate, factored, multiply_by_parameter_scale, beta1,
        decay_rate, step_offset, clipping_threshold, weight_decay_rate,
        min_dim_size_to_factor, epsilon1, epsilon2))
    self.dtype_momentum = jax.dtypes.canonicalize_dtype(dtype_momentum)

  def _pieces(self, hp):
    """(name, transformation) of the chain for hyper-parameters ``hp``."""
    return legacy_optax._adafactor_pieces(hp, self.hyper_params,  # pylint: disable=protected-access
                                          self.dtype_momentum)

  def transform(self, hp):
    return legacy_optax._adafactor(hp, self.hyper_params,  # pylint: disable=protected-access
                                   self.dtype_momentum)

  def state_to_optax(self, hp, count, fields):
    states = []
    for name, _ in self._pieces(hp):
      if name == 'factored':
        states.append(optax.FactoredState(
            count=count, v_row=fields['v_row'], v_col=fields['v_col'],
            v=fields['v']))
      elif name == 'momentum':
        states.append(optax.EmaState(count=count, ema=fields['m']))
      else:
        states.append(optax.EmptyState())
    return tuple(states)

  def state_from_optax(self, hp, opt_state, fields):
    names = [name for name, _ in self._pieces(hp)]
    factored = opt_state[names.index('factored')]
    out = {'v_row': factored.v_row, 'v_col': factored.v_col,
           'v': factored.v}
    if 'momentum' in names:
      out['m'] = opt_state[names.index('momentum')].ema
    else:
      out['m'] = jax.tree_util.tree_map(_placeholder, factored.v)
    return out
