"""Removed names answer on first access, before (or without) activation.

Installed by the start-up hook when ``jax`` is imported (not under
``FLAXLEGACY=on``, which activates there instead; ``FLAXLEGACY_FALLBACK=off``
leaves it out).  Each module that lost names listed in ``_names.JAX_ALIASES``
gets a module ``__getattr__`` -- Python calls it only for names the module
does not define -- that answers exactly those names with their legacy
meaning, and otherwise raises the ``AttributeError`` the module raised
before (a module's own ``__getattr__``, such as JAX's deprecation messages,
is asked first and kept for every other name).

Names only: legacy *mode* (the PRNG stream, checkpoints, the behaviours in
``_behaviour``) still starts at activation, because it changes numbers and
would change modern programs.  Decision and evidence: docs/decisions.md.
"""

import sys
import types

from flaxlegacy import _names

MARK = '_flaxlegacy_fallback'


def _tables():
  """{owner module: {name: Alias}} for the removed names of modules."""
  tables = {}
  for alias in _names.JAX_ALIASES:
    tables.setdefault(alias.owner, {})[alias.name] = alias
  return tables


def answers(owner, name):
  """True if ``name`` on ``owner`` is answered by this fallback."""
  getattr_ = getattr(owner, '__dict__', {}).get('__getattr__')
  return name in getattr(getattr_, MARK, ())


def _install_on(module, table):
  namespace = module.__dict__
  previous = namespace.get('__getattr__')
  if getattr(previous, MARK, None) is not None:
    return
  module_name = module.__name__

  def __getattr__(name):  # pylint: disable=invalid-name
    if previous is not None:
      try:
        return previous(name)
      except AttributeError:
        if name not in table:
          raise
    elif name not in table:
      raise AttributeError(
          f'module {module_name!r} has no attribute {name!r}')
    from flaxlegacy import _activate  # pylint: disable=g-import-not-at-top
    return _activate.alias_value(table[name])

  setattr(__getattr__, MARK, frozenset(table))
  namespace['__getattr__'] = __getattr__


def install(module=None):  # pylint: disable=unused-argument
  """Installs the fallback on every owner module, now or once imported."""
  from flaxlegacy import _hook  # pylint: disable=g-import-not-at-top
  for owner, table in _tables().items():
    if owner in _names.MODULES_BY_LEGACY:
      continue  # jax.config: an object served by the hook, no module
    def on_import(mod, table=table):
      if isinstance(mod, types.ModuleType):  # jax.config is an object
        _install_on(mod, table)
    if owner in sys.modules:
      on_import(sys.modules[owner])
    else:
      _hook.after_import(owner, on_import)
