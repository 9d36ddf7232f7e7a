"""Legacy ``flax.nn`` (v0.1.0rc2 - v0.3.6).

The package exports the legacy top-level names (spec legacy-nn.md 1.2) and
imports every submodule, so ``nn.base``, ``nn.linear`` ... are attributes.
As in legacy Flax, ``nn.stochastic`` is the context-manager *function*; the
submodule is reached with ``import flax.nn.stochastic`` (``sys.modules``).
There is no ``nn.jit`` (legacy never had one).
"""

from flaxlegacy import _activate as _activate_module

_activate_module.activate()

# pylint: disable=g-import-not-at-top,g-multiple-import,wrong-import-position
# Every submodule is an attribute of the package, as in legacy.
from flaxlegacy.nn import utils
from flaxlegacy.nn import base
from flaxlegacy.nn import initializers
from flaxlegacy.nn import activation
from flaxlegacy.nn import linear
from flaxlegacy.nn import normalization
from flaxlegacy.nn import pooling
from flaxlegacy.nn import recurrent
from flaxlegacy.nn import attention

from flaxlegacy.nn.activation import (celu, elu, gelu, glu, leaky_relu,
                                      log_sigmoid, log_softmax, relu, sigmoid,
                                      soft_sign, softmax, softplus, swish,
                                      silu, tanh)
from flaxlegacy.nn.attention import (dot_product_attention,
                                     MultiHeadDotProductAttention,
                                     SelfAttention)
from flaxlegacy.nn.base import (Module, Model, Collection,
                                capture_module_outputs, module, stateful,
                                get_state, module_method)
from flaxlegacy.nn.linear import Dense, DenseGeneral, Conv, ConvTranspose, Embed
from flaxlegacy.nn.normalization import BatchNorm, LayerNorm, GroupNorm
from flaxlegacy.nn.pooling import max_pool, avg_pool
from flaxlegacy.nn.recurrent import (LSTMCell, GRUCell, ConvLSTM,
                                     OptimizedLSTMCell)
# Last, as in legacy: this re-binds the package attribute ``stochastic`` from
# the submodule (set when base imported it) to the context-manager function.
from flaxlegacy.nn.stochastic import make_rng, stochastic, dropout, is_stochastic
