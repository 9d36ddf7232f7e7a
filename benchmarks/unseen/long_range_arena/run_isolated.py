"""Runs driver.py with each model file imported on its own.

An upgraded tree keeps a legacy import where the upgrade left a TODO, so
one model file that does not import would stop the whole driver.  Here each
``lra_benchmarks.models.*`` module that fails to import is replaced by a
stand-in whose every attribute is an object raising that ImportError when
used: the families built of it fail alone, with the original error.

Usage: LRA_SRC=<dir holding lra_benchmarks> python run_isolated.py OUT.npz [family...]
"""
import importlib
import os
import runpy
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get('LRA_SRC', '/work/unseen/lra'))
sys.path.insert(1, os.path.join(HERE, 'shims'))

MODULES = [
    'bigbird.bigbird', 'linear_transformer.linear_transformer',
    'linformer.linformer', 'local.local', 'longformer.longformer',
    'performer.performer', 'reformer.reformer',
    'sinkhorn_transformer.sinkhorn_transformer',
    'sparse_transformer.sparse_attention',
    'sparse_transformer.sparse_transformer', 'synthesizer.synthesizer',
    'transformer.transformer', 'transformer_tlb.transformer_tlb',
]


def _broken(name, error):
  """A class whose every use (attribute, call) raises ``error``."""

  def fail(*args, **kwargs):
    del args, kwargs
    raise ImportError(f'{name} did not import: {error}') from error

  meta = type('_BrokenMeta', (type,), {
      '__getattr__': lambda cls, attr: fail(),
      '__call__': fail})
  return meta('_Broken', (), {})


def _stand_in(name, error):
  mod = types.ModuleType(name)
  mod.__getattr__ = lambda attr: _broken(f'{name}.{attr}', error)
  return mod


for m in MODULES:
  full = 'lra_benchmarks.models.' + m
  try:
    importlib.import_module(full)
  except ImportError as e:
    print(f'{full}: does not import ({type(e).__name__}: {e})')
    for k in [k for k in sys.modules if k.startswith(full)]:
      del sys.modules[k]
    sys.modules[full] = _stand_in(full, e)
    pkg = sys.modules.get(full.rsplit('.', 1)[0])
    if pkg is not None:
      setattr(pkg, full.rsplit('.', 1)[1], sys.modules[full])

sys.argv = [os.path.join(HERE, 'driver.py')] + sys.argv[1:]
runpy.run_path(sys.argv[0], run_name='__main__')
