"""Legacy ``flax.optim.adagrad``: ``G' = G + g^2``,
``p' = p - lr g / (sqrt(G') + eps)``.

optax's ``adagrad`` puts eps inside the root (a different function, spec
§7.4), so the scaling is ``scale_by_legacy_adagrad`` (ours, built like
optax's ``scale_by_rss``) followed by ``scale_by_learning_rate``.
"""

from typing import Any

from flax import struct
import optax

from flaxlegacy.migrate import legacy_optax
from flaxlegacy.optim.base import OptaxOptimizerDef


@struct.dataclass
class _AdagradHyperParams:
  learning_rate: Any
  eps: Any


@struct.dataclass
class _AdagradParamState:
  G: Any  # pylint: disable=invalid-name


class Adagrad(OptaxOptimizerDef):
  """Adagrad optimizer."""

  param_state_cls = _AdagradParamState

  def __init__(self, learning_rate=None, eps=1e-8):
    super().__init__(_AdagradHyperParams(learning_rate, eps))

  def transform(self, hp):
    return legacy_optax._adagrad(hp.learning_rate, hp.eps)  # pylint: disable=protected-access

  def state_to_optax(self, hp, count, fields):
    return (optax.ScaleByRssState(sum_of_squares=fields['G']),
            optax.EmptyState())

  def state_from_optax(self, hp, opt_state, fields):
    return {'G': opt_state[0].sum_of_squares}
