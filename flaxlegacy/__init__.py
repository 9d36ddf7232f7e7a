"""flaxlegacy: the legacy Flax API (``flax.nn``, ``flax.optim``) on today's JAX.

Once installed, unchanged 2020-2021 Flax code runs: ``from flax import nn``,
``from flax import optim``, ``from flax.deprecated import nn`` and the JAX
names old code used (``jax.tree_multimap`` ...) resolve.  The start-up hook
(``flaxlegacy.pth``) does that; ``activate()`` and ``python -m flaxlegacy
SCRIPT`` do it where .pth files are skipped.

Importing this package is cheap: it imports neither JAX nor Flax.

PYTEST_DONT_REWRITE: the start-up hook imports this package before pytest
loads flaxlegacy's plugin (flaxlegacy/pytest_plugin.py), so pytest must not
try to rewrite its assertions (it would warn, an error under ``-W error``).
"""

from flaxlegacy.version import __version__


def activate():
  """Makes the legacy API importable and applies the legacy policies.

  Idempotent.  Installs the import hook (if the start-up .pth did not), adds
  the removed JAX names where absent and switches on legacy mode (the legacy
  PRNG stream, legacy checkpoints and the JAX behaviour legacy code relied
  on; see README for the opt-outs).
  """
  from flaxlegacy import _activate  # pylint: disable=g-import-not-at-top
  _activate.activate()


def __getattr__(name):
  # Lazy subpackages, so `import flaxlegacy` stays cheap.
  if name in ('nn', 'optim', 'migrate', 'datasets', 'deprecated', 'cli'):
    import importlib  # pylint: disable=g-import-not-at-top
    return importlib.import_module('flaxlegacy.' + name)
  raise AttributeError(f"module 'flaxlegacy' has no attribute {name!r}")
