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
import importlib as _importlib
import importlib.util as _importlib_util

from flaxlegacy.nn import utils
from flaxlegacy.nn import stochastic as _stochastic_module
from flaxlegacy.nn import base
from flaxlegacy.nn.base import (Module, Model, Collection,
                                capture_module_outputs, module, stateful,
                                get_state, module_method)


def _import_layers(name, names):
  """Imports the layer submodule ``name`` (if written yet) and its names.

  The layer modules are written alongside the core; a module whose file does
  not exist yet is skipped, but one that exists is imported plainly so that
  its errors surface.
  """
  full = f'{__name__}.{name}'
  if _importlib_util.find_spec(full) is None:
    return
  submodule = _importlib.import_module(full)
  globals()[name] = submodule
  for attr in names:
    if hasattr(submodule, attr):
      globals()[attr] = getattr(submodule, attr)


_import_layers('initializers', ())
_import_layers('activation', (
    'celu', 'elu', 'gelu', 'glu', 'leaky_relu', 'log_sigmoid', 'log_softmax',
    'relu', 'sigmoid', 'soft_sign', 'softmax', 'softplus', 'swish', 'silu',
    'tanh'))
_import_layers('linear', ('Dense', 'DenseGeneral', 'Conv', 'ConvTranspose',
                          'Embed'))
_import_layers('normalization', ('BatchNorm', 'LayerNorm', 'GroupNorm'))
_import_layers('pooling', ('max_pool', 'avg_pool'))
_import_layers('recurrent', ('LSTMCell', 'GRUCell', 'ConvLSTM',
                             'OptimizedLSTMCell'))
_import_layers('attention', ('dot_product_attention',
                             'MultiHeadDotProductAttention', 'SelfAttention'))

# Last: re-binds ``stochastic`` from the submodule to the function.
from flaxlegacy.nn.stochastic import make_rng, stochastic, dropout, is_stochastic

del _import_layers
