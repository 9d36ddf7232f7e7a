"""Removed names answer on first access, before (or without) activation.

Two uses, one mechanism (a module ``__getattr__``, which Python calls only
for names the module does not define):

* Installed by the start-up hook when ``jax`` is imported (not under
  ``FLAXLEGACY=on``, which activates there instead; ``FLAXLEGACY_FALLBACK=off``
  leaves it out): each module that lost names listed in
  ``_names.JAX_ALIASES`` answers exactly those names with their legacy
  meaning, and otherwise raises the ``AttributeError`` it raised before (a
  module's own ``__getattr__``, such as JAX's deprecation messages, is asked
  first and kept for every other name).
* Under ``FLAXLEGACY=on``, for the Python and NumPy names a program may use
  before it imports JAX (``collections.Iterable``, ``inspect.getargspec``,
  ``np.float``): installed the moment ``collections``, ``inspect`` or
  ``numpy`` has been imported.  Activation later makes them plain
  attributes.

Start-up safety: this module is imported from inside other imports (the
standard library's own, under ``FLAXLEGACY=on``: ``enum`` importing
``functools`` importing ``collections``).  At that moment any module on the
import stack is half-initialised, so installing must import nothing but
``_names`` (which needs only ``collections``, complete by then).  Values are
resolved on first access, from user code, where nothing is half-built.

Names only: legacy *mode* (the PRNG stream, checkpoints, the behaviours in
``_behaviour``) still starts at activation, because it changes numbers and
would change modern programs.  Decision and evidence: docs/decisions.md.
"""

import sys

from flaxlegacy import _names

MARK = '_flaxlegacy_fallback'
_MODULE_TYPE = type(sys)


def _tables(aliases):
  """{owner module: {name: Alias}} for ``aliases``."""
  tables = {}
  for alias in aliases:
    tables.setdefault(alias.owner, {})[alias.name] = alias
  return tables


def answers(owner, name):
  """True if ``name`` on ``owner`` is answered by this fallback."""
  getattr_ = getattr(owner, '__dict__', {}).get('__getattr__')
  return name in getattr(getattr_, MARK, ())


def _resolve(dotted):
  """A module or object by dotted path: 'jax.config' is jax's Config object."""
  import importlib  # pylint: disable=g-import-not-at-top
  try:
    return importlib.import_module(dotted)
  except ImportError:
    head, _, attr = dotted.rpartition('.')
    if not head:
      raise
    return getattr(_resolve(head), attr)


def value_of(spec):
  """The legacy value named by an ``Alias.value`` spec.

  ``'module:attr'``, ``'module:'`` (the module itself: ``np.math`` is
  ``math``) or ``'@name'`` (a small replacement defined in ``_activate``).
  """
  if spec.startswith('@'):
    from flaxlegacy import _activate  # pylint: disable=g-import-not-at-top
    return _activate.SPECIAL[spec[1:]]
  import importlib  # pylint: disable=g-import-not-at-top
  module, _, attr = spec.partition(':')
  if not attr:
    return importlib.import_module(module)
  return getattr(_resolve(module), attr)


def _install_on(module, table):
  namespace = module.__dict__
  previous = namespace.get('__getattr__')
  if getattr(previous, MARK, None) is not None:
    return
  module_name = module.__name__

  def __getattr__(name):  # pylint: disable=invalid-name
    alias = table.get(name)
    if previous is not None:
      if alias is None:
        return previous(name)
      import warnings  # pylint: disable=g-import-not-at-top
      try:
        with warnings.catch_warnings():
          # numpy's own __getattr__ warns (FutureWarning) before raising
          # for np.object / np.str: the legacy name answers, quietly.
          warnings.simplefilter('ignore')
          return previous(name)
      except AttributeError:
        pass
    elif alias is None:
      raise AttributeError(
          f'module {module_name!r} has no attribute {name!r}')
    return value_of(alias.value)

  setattr(__getattr__, MARK, frozenset(table))
  namespace['__getattr__'] = __getattr__


def install(module=None):  # pylint: disable=unused-argument
  """Installs the fallback on every owner module, now or once imported."""
  from flaxlegacy import _hook  # pylint: disable=g-import-not-at-top
  for owner, table in _tables(_names.JAX_ALIASES).items():
    if owner in _names.MODULES_BY_LEGACY:
      continue  # jax.config: an object served by the hook, no module
    def on_import(mod, table=table):
      if isinstance(mod, _MODULE_TYPE):  # jax.config is an object
        _install_on(mod, table)
    if owner in sys.modules:
      on_import(sys.modules[owner])
    else:
      _hook.after_import(owner, on_import)


def install_early(module):
  """The removed names owned by ``module`` itself (``collections``,
  ``inspect``, ``numpy``), answered on first access (``FLAXLEGACY=on``)."""
  table = _tables(a for a in _names.ALIASES
                  if a.owner == module.__name__).get(module.__name__)
  if table:
    _install_on(module, table)
