"""The import hook that makes legacy paths (``flax.nn`` ...) resolve.

Installed at interpreter start by ``flaxlegacy.pth`` (or by ``activate()``).
It is dormant and cheap: it imports nothing heavy until a legacy path is
imported, and it serves only paths that do not exist, because its finder sits
at the *end* of ``sys.meta_path`` (every real module is found first).

Two finders:

* ``LegacyFinder`` (last on ``sys.meta_path``) serves every module path listed
  in ``_names.MODULES`` by aliasing it to the flaxlegacy module that implements
  it, the way ``six.moves`` does, and answers any other path under a legacy
  root (``flax.nn.foo``) with an ImportError that names flaxlegacy's coverage.
* ``FlaxAttributeFinder`` (first on ``sys.meta_path``) looks only at the
  import of ``flax`` itself, and of the few modules ``after_import`` waits
  for (``jax`` under ``FLAXLEGACY=on``): after the real package has run, it
  gives ``flax`` a module ``__getattr__`` so that ``import flax;
  flax.nn.Dense`` works as in 2020 (it adds a name; it replaces none), then
  runs the callbacks registered for that module.
"""

import importlib
import os
import sys

# Deliberately no import of importlib.abc or of the names table here: this
# module runs at every interpreter start.  The table is imported on first
# use, which only happens for imports no other finder could satisfy.


def _names():
  from flaxlegacy import _names as names  # pylint: disable=g-import-not-at-top
  return names


class LegacyNotProvidedError(ModuleNotFoundError):
  """A legacy path that flaxlegacy does not (yet) provide.

  A ModuleNotFoundError (so ``except ImportError`` fallbacks keep working)
  whose message names flaxlegacy's coverage instead of a bare "No module".
  """


def _serve_jax_config():
  """``jax.config`` as a module path (removed in jax 0.4.29).

  The module served *is* today's ``jax.config`` object, given a ``config``
  attribute that points to itself: ``from jax.config import config`` then
  works, and the import system's ``setattr(jax, 'config', ...)`` re-assigns
  the very object that is already there instead of clobbering it.
  """
  import jax  # pylint: disable=g-import-not-at-top
  cfg = jax.config
  if not hasattr(cfg, 'config'):
    try:
      setattr(cfg, 'config', cfg)
    except AttributeError:  # pragma: no cover - depends on the Config class
      pass
  return cfg


_FACTORIES = {'jax.config': _serve_jax_config}


class _AliasLoader:
  """Loads a legacy path as the module that implements it."""

  def __init__(self, entry):
    self.entry = entry

  def create_module(self, spec):
    if self.entry.legacy.startswith('flax.'):
      from flaxlegacy import _activate  # pylint: disable=g-import-not-at-top
      _activate.activate()
    if not self.entry.target:
      return _FACTORIES[self.entry.legacy]()
    try:
      module = importlib.import_module(self.entry.target)
    except ModuleNotFoundError as e:
      if e.name != self.entry.target:
        raise
      raise LegacyNotProvidedError(
          _names().coverage_message(self.entry.legacy),
          name=self.entry.legacy) from None
    # The import system stamps the alias spec onto the module; remember the
    # module's own spec to put it back (reload, importlib.resources).
    self._own_spec = getattr(module, '__spec__', None)
    return module

  def exec_module(self, module):
    legacy, target = self.entry.legacy, self.entry.target
    own_spec = getattr(self, '_own_spec', None)
    if own_spec is not None:
      module.__spec__ = own_spec
    if legacy in _FACTORIES:
      # Keep the served object (not a module wrapper) in sys.modules, so the
      # parent attribute the import system sets afterwards is unchanged.
      sys.modules[legacy] = module
      return
    # Register the submodules the target package has already imported under
    # their legacy names too.  Otherwise a later ``import flax.nn.stochastic``
    # would re-bind the package attribute ``nn.stochastic`` (legacy: the
    # context-manager function) to the submodule.
    prefix = target + '.'
    for name, mod in list(sys.modules.items()):
      if name.startswith(prefix) and mod is not None:
        alias = legacy + '.' + name[len(prefix):]
        if alias not in sys.modules and _names().legacy_root(alias):
          sys.modules[alias] = mod


class LegacyFinder:
  """Serves the legacy module paths of ``_names.MODULES`` (last resort)."""

  def find_spec(self, fullname, path=None, target=None):
    if not fullname.startswith(('flax.', 'jax.')):
      return None  # sitecustomize probes etc.: never load the table for them
    names = _names()
    entry = names.MODULES_BY_LEGACY.get(fullname)
    if entry is not None:
      import importlib.machinery  # pylint: disable=g-import-not-at-top
      return importlib.machinery.ModuleSpec(
          fullname, _AliasLoader(entry), is_package=True)
    if names.legacy_root(fullname):
      raise LegacyNotProvidedError(names.coverage_message(fullname),
                                   name=fullname)
    return None

  def invalidate_caches(self):
    pass


# Module name -> callbacks(module) to run once it has been imported.
_AFTER_IMPORT = {}


def after_import(name, callback):
  """Runs ``callback(module)`` once the module ``name`` has been imported.

  At once if it already is; otherwise right after its own code has run.
  There it runs inside somebody else's import, so an error it raises is
  reported on stderr (``report_once``) and the import goes on.
  """
  module = sys.modules.get(name)
  if module is not None:
    callback(module)
    return
  _AFTER_IMPORT.setdefault(name, []).append(callback)
  install()


def _run_after_import(module):
  name = getattr(module, '__name__', None)
  for callback in _AFTER_IMPORT.pop(name, ()):
    try:
      callback(module)
    except Exception as e:  # pylint: disable=broad-except
      report_once(f'a legacy addition to {name} ({_describe(callback)})', e,
                  f'{name} is left as it is')


def _describe(callback):
  return getattr(callback, '__qualname__', None) or repr(callback)


class _FlaxLoader:
  """Runs the real package (``flax``, ``jax``), then the legacy additions."""

  def __init__(self, loader):
    self._loader = loader

  def create_module(self, spec):
    return self._loader.create_module(spec)

  def exec_module(self, module):
    self._loader.exec_module(module)
    if module.__name__ == 'flax':
      add_flax_legacy_attributes(module)
    _run_after_import(module)

  def __getattr__(self, name):
    # get_resource_reader, get_source, is_package ... of the real loader.
    return getattr(self._loader, name)


_LEGACY_FLAX_ATTRIBUTES = ('nn', 'optim', 'deprecated')


def add_flax_legacy_attributes(flax_module):
  """Gives ``flax`` a module ``__getattr__`` for ``nn``, ``optim``, ...

  Only names the package does not define are resolved (lazily, by importing
  ``flax.<name>``); an existing ``__getattr__`` is chained to, not replaced.
  """
  namespace = flax_module.__dict__
  previous = namespace.get('__getattr__')
  if getattr(previous, '_flaxlegacy', False):
    return

  def __getattr__(name):  # pylint: disable=invalid-name
    if name in _LEGACY_FLAX_ATTRIBUTES:
      return importlib.import_module('flax.' + name)
    if previous is not None:
      return previous(name)
    raise AttributeError(f"module 'flax' has no attribute {name!r}")

  __getattr__._flaxlegacy = True  # pylint: disable=protected-access
  namespace['__getattr__'] = __getattr__


class FlaxAttributeFinder:
  """Wraps the loader of the real ``flax`` package (and nothing else)."""

  def find_spec(self, fullname, path=None, target=None):
    if fullname != 'flax' and fullname not in _AFTER_IMPORT:
      return None
    for finder in sys.meta_path:
      if finder is self or isinstance(finder, FlaxAttributeFinder):
        continue
      find_spec = getattr(finder, 'find_spec', None)
      if find_spec is None:
        continue
      spec = find_spec(fullname, path, target)
      if spec is not None:
        if spec.loader is not None and not isinstance(spec.loader,
                                                      _FlaxLoader):
          spec.loader = _FlaxLoader(spec.loader)
        return spec
    return None

  def invalidate_caches(self):
    pass


def installed():
  return any(isinstance(f, LegacyFinder) for f in sys.meta_path)


def install():
  """Puts both finders on ``sys.meta_path`` (idempotent)."""
  if not any(isinstance(f, FlaxAttributeFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, FlaxAttributeFinder())
  if not installed():
    sys.meta_path.append(LegacyFinder())
  flax_module = sys.modules.get('flax')
  if flax_module is not None:
    add_flax_legacy_attributes(flax_module)


def uninstall():
  """Removes both finders (for tests and for opting out at run time)."""
  sys.meta_path[:] = [
      f for f in sys.meta_path
      if not isinstance(f, (FlaxAttributeFinder, LegacyFinder))]


STARTUP_ON = ('on', '1', 'true', 'yes', 'legacy')

_REPORTED = set()


def report_once(what, error, instead):
  """One line on stderr: what the hook could not serve, and what happens.

  Never raises: it runs where a raise would break the user's import.
  """
  if what in _REPORTED:
    return
  _REPORTED.add(what)
  try:
    sys.stderr.write(f'flaxlegacy: {what} failed '
                     f'({type(error).__name__}: {error}); {instead}\n')
  except Exception:  # pylint: disable=broad-except
    pass


def _guarded(what, instead, callback):
  """``callback(module)`` that reports a failure instead of raising it.

  The start-up hook's callbacks run inside the user's imports (of
  ``collections`` by the standard library itself, of ``jax``): an error
  there must not become the user's ``ImportError``.
  """
  def run(module):
    try:
      callback(module)
    except Exception as e:  # pylint: disable=broad-except
      report_once(what, e, instead)
  return run


def _activate_now(module):  # pylint: disable=unused-argument
  from flaxlegacy import _activate  # pylint: disable=g-import-not-at-top
  _activate.activate()


# Modules whose removed names a program may use before it imports JAX.
_EARLY_ALIAS_MODULES = ('collections', 'inspect', 'numpy')


def _install_early_names(module):
  # Import-free at this moment (see _fallback): the values are resolved on
  # first access, and activation makes them plain attributes.
  from flaxlegacy import _fallback  # pylint: disable=g-import-not-at-top
  _fallback.install_early(module)


def _install_fallback(module):  # pylint: disable=unused-argument
  from flaxlegacy import _fallback  # pylint: disable=g-import-not-at-top
  _fallback.install()


def _install_at_startup():
  """Entry point of flaxlegacy.pth: must stay cheap and never raise.

  ``FLAXLEGACY=on`` makes the whole process legacy: activation runs as soon
  as ``jax`` has been imported (JAX itself is not imported here).  Otherwise
  the removed JAX names answer on first access once ``jax`` is imported
  (``_fallback``; ``FLAXLEGACY_FALLBACK=off`` leaves that out).

  Each callback runs inside an import the user (or the standard library)
  made, so it is guarded: a failure is one line on stderr, never a broken
  import.
  """
  try:
    install()
    if os.environ.get('FLAXLEGACY', '').strip().lower() in STARTUP_ON:
      for module in _EARLY_ALIAS_MODULES:
        after_import(module, _guarded(
            f'FLAXLEGACY=on: adding the removed {module} names',
            'they come with activation (the first legacy import) instead',
            _install_early_names))
      after_import('jax', _guarded(
          'FLAXLEGACY=on: activation when jax was imported',
          'legacy mode starts at the first legacy import instead',
          _activate_now))
    elif os.environ.get('FLAXLEGACY_FALLBACK', '').strip().lower() not in (
        'off', '0', 'false', 'no', 'modern'):
      after_import('jax', _guarded(
          'the first-access fallback for removed JAX names',
          'they come with activation (the first legacy import) instead',
          _install_fallback))
  except Exception as e:  # pylint: disable=broad-except
    # A broken hook must never break the interpreter's start-up.
    report_once('the start-up hook', e,
                'use `flaxlegacy run` or flaxlegacy.activate() instead')
