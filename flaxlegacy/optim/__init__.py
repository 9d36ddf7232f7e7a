"""Legacy ``flax.optim`` (v0.1.0rc2 - v0.5.3), on optax.

Every built-in optimizer is an optax ``GradientTransformation`` whose state
is kept in the legacy ``param_states`` layout; ``OptimizerDef.as_optax()``,
``to_optax_state`` / ``from_optax_state`` and ``from_optax(tx)`` bridge to
optax code.  Private dataclasses are exported here too (v0.1.0rc2 had a
single ``flax/optim.py`` module; Decision D1).
"""

from flaxlegacy import _activate as _activate_module

_activate_module.activate()

# pylint: disable=g-import-not-at-top,g-bad-import-order
from flaxlegacy.optim.adabelief import _AdaBeliefHyperParams
from flaxlegacy.optim.adabelief import _AdaBeliefParamState
from flaxlegacy.optim.adabelief import AdaBelief
from flaxlegacy.optim.adadelta import _AdadeltaHyperParams
from flaxlegacy.optim.adadelta import _AdadeltaParamState
from flaxlegacy.optim.adadelta import Adadelta
from flaxlegacy.optim.adafactor import _AdafactorHyperParams
from flaxlegacy.optim.adafactor import _AdafactorParamState
from flaxlegacy.optim.adafactor import Adafactor
from flaxlegacy.optim.adagrad import _AdagradHyperParams
from flaxlegacy.optim.adagrad import _AdagradParamState
from flaxlegacy.optim.adagrad import Adagrad
from flaxlegacy.optim.adam import _AdamHyperParams
from flaxlegacy.optim.adam import _AdamParamState
from flaxlegacy.optim.adam import Adam
from flaxlegacy.optim.base import _NoAux
from flaxlegacy.optim.base import _ShapeDtype
from flaxlegacy.optim.base import _sorted_items
from flaxlegacy.optim.base import from_optax
from flaxlegacy.optim.base import ModelParamTraversal
from flaxlegacy.optim.base import MultiOptimizer
from flaxlegacy.optim.base import OptaxOptimizerDef
from flaxlegacy.optim.base import OptaxWrapper
from flaxlegacy.optim.base import Optimizer
from flaxlegacy.optim.base import OptimizerDef
from flaxlegacy.optim.base import OptimizerState
from flaxlegacy.optim.base import ReplicatedOptimizer
from flaxlegacy.optim.base import set_multi_optimizer_layout
from flaxlegacy.optim.dynamic_scale import DynamicScale
from flaxlegacy.optim.dynamic_scale import DynamicScaleResult
from flaxlegacy.optim.lamb import _LAMBHyperParams
from flaxlegacy.optim.lamb import _LAMBParamState
from flaxlegacy.optim.lamb import LAMB
from flaxlegacy.optim.lars import _LARSHyperParams
from flaxlegacy.optim.lars import _LARSParamState
from flaxlegacy.optim.lars import LARS
from flaxlegacy.optim.momentum import _MomentumHyperParams
from flaxlegacy.optim.momentum import _MomentumParamState
from flaxlegacy.optim.momentum import Momentum
from flaxlegacy.optim.rmsprop import _RMSPropHyperParams
from flaxlegacy.optim.rmsprop import _RMSPropParamState
from flaxlegacy.optim.rmsprop import RMSProp
from flaxlegacy.optim.sgd import _GradientDescentHyperParams
from flaxlegacy.optim.sgd import GradientDescent
from flaxlegacy.optim.weight_norm import _WeightNormHyperParams
from flaxlegacy.optim.weight_norm import _WeightNormParamState
from flaxlegacy.optim.weight_norm import WeightNorm

# The legacy public names (the __all__ of v0.3.6 plus nothing else), so
# `from flax.optim import *` behaves as it did.
__all__ = [
    'Adam', 'AdaBelief', 'Adadelta', 'Adafactor', 'Adagrad',
    'OptimizerState', 'OptimizerDef', 'Optimizer', 'MultiOptimizer',
    'ModelParamTraversal', 'DynamicScale', 'LAMB', 'LARS', 'Momentum',
    'RMSProp', 'GradientDescent', 'WeightNorm',
]
