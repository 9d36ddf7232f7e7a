"""Rules: early linen (flax 0.3.x) -> today's linen, one module per concept.

Code of 2021 wrote its linen half for flax 0.3.x; in legacy processes
flaxlegacy restores that behaviour at run time (flaxlegacy/compat/
early_linen.py).  These rules rewrite the source instead, so the code runs
on today's linen with ``FLAXLEGACY=off``:

* ``initializers``: an initializer without a dtype parameter gets one; a
  ``functools.partial`` binding ``dtype=`` is wrapped in
  ``upgraded_layers.legacy_initializer``.
* ``carries``: ``Cell.initialize_carry(rng, batch_dims, size)`` -> today's
  instance method; cells built without ``features`` (or handed to
  ``nn.scan``) -> ``legacy_cells``; ``nn.ConvLSTM`` -> its name today.
* ``frozendict``: ``variables.unfreeze()``, ``.pop(key)``, ``.copy(...)``,
  ``.pretty_repr()`` -> the ``flax.core`` functions (dicts and FrozenDicts);
  ``rest, value = x.pop(k)`` where ``x`` is known to hold an ``init``'s
  variables (also in files importing only JAX), else a TODO.
* ``param_override``: ``def param(self, name, init_fn, shape)`` of a layer
  subclass also takes (and ignores) today's ``param_dtype``.
* ``attention``: the mask as third positional argument -> ``mask=``.
* ``early_stopping``: ``has_improved, state = state.update(m)`` -> two
  statements.
* ``jax_calls``: ``jax.remat(..., concrete=False)`` loses the keyword
  (today's JAX refuses it), ``concrete=True`` keeps a TODO;
  ``jnp.array(-1, dtype=jnp.uint32)``: an integer literal out of its
  dtype's range -> the value NumPy 1.x cast it to (also in files importing
  only JAX); ``lax.dynamic_slice`` slice sizes given as ``jnp.array`` of a
  literal tuple -> the tuple; ``int(jax.random.randint(k, [1], 0, n))``:
  a scalar cast of a call known to make a one-element array -> of its
  ``item()``.
* ``removed_modules``: ``jax.lib.xla_client`` becomes the shipped stand-in
  where a file uses only ``PaddingType`` of it, ``jaxlib.xla_client`` where
  only names that module still has; else its import keeps a TODO.
* ``keys``: flax 0.3 derived parameter keys differently; nothing in the
  source can change that, so a file that the rules above (not
  ``jax_calls``) rewrote (it is early linen, not linen the upgrade wrote
  from ``flax.nn``) and that initialises linen modules gets a TODO saying
  so; in a file importing only JAX, at its first ``init`` call; and a file
  importing only JAX that initialises modules of a codebase file importing
  flax.linen, where some file shows a flax 0.3 pattern, at that import
  (``keys_across_files``, after every file is rewritten).

Each rule is a libcst transformer over the whole file, run in the order
of ``RULES``; all read the same ``LinenNames`` of the file (_common.py).
"""

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade.rules.early_linen import _common
from flaxlegacy.upgrade.rules.early_linen import attention
from flaxlegacy.upgrade.rules.early_linen import carries
from flaxlegacy.upgrade.rules.early_linen import early_stopping
from flaxlegacy.upgrade.rules.early_linen import frozendict
from flaxlegacy.upgrade.rules.early_linen import initializers
from flaxlegacy.upgrade.rules.early_linen import jax_calls
from flaxlegacy.upgrade.rules.early_linen import keys
from flaxlegacy.upgrade.rules.early_linen import param_override
from flaxlegacy.upgrade.rules.early_linen import removed_modules

# Rules that add lines (statements, TODO comments) last, so that the
# report's line numbers are those of the file as written.
RULES = (initializers, frozendict, param_override, attention, carries,
         early_stopping, jax_calls, removed_modules, keys)
# in a file importing only JAX (frozendict: only ``pop``; keys: at an init)
JAX_RULES = (initializers, frozendict, jax_calls, removed_modules, keys)


# Substrings without which a file has nothing for these rules (api.py).
MARKERS = ('initialize_carry', 'LSTMCell', 'GRUCell', 'ConvLSTM', '_init',
           'xla_client',
           'unfreeze', '.pop(', '.copy(', 'pretty_repr', 'def param(',
           'MultiHeadDotProductAttention', 'early_stopping', '.init(',
           'concrete', 'int8', 'int16', 'int32', 'int64', 'dynamic_slice',
           # a scalar cast of a one-element array (jax_calls)
           'random.', 'zeros(', 'ones(', 'empty(', 'full(', 'array(')
# What a file must import for the rules to look at it: today's flax API
# (a file with only the legacy flax.nn / flax.optim is the legacy rules').
_FLAX_TODAY = ('flax.linen', 'flax.core', 'flax.training', 'flax.struct',
               'flax.serialization', 'flax.jax_utils')


def run(file_facts, report, module, code=None, written=None, known=None):
  """The module with early-linen code rewritten (the same object if none).

  ``known``: a cst_util.StatementTexts of the file's statements (their
  source is not generated again).

  Runs after the legacy rules, with the imports as written, and only on
  files that import today's flax API (``_FLAX_TODAY``, or ``import flax``).
  """
  names = _common.LinenNames(file_facts.imports)
  rules = RULES
  jax_only = False
  if not (any(names.imports_module(m) for m in _FLAX_TODAY) or
          file_facts.imports.get('flax') == 'flax'):
    if not names.imports_module('jax'):
      return module
    # a JAX module: its initializers for linen layers, JAX call forms,
    # removed JAX modules, and variables of an init it calls (not in a
    # file of legacy flax.nn / flax.optim: its init is legacy's)
    if names.imports_module('flax'):
      rules = (initializers, jax_calls, removed_modules)
    else:
      rules, jax_only = JAX_RULES, True
  code = cst_util.code(module) if code is None else code  # (``code``: the module's)
  needed = set()
  rewrote = len(report.rewritten)
  for rule in rules:
    if rule is keys and not any(r['rule'] != jax_calls.Rule.NAME
                                for r in report.rewritten[rewrote:]):
      break  # no flax 0.3 pattern here: nothing says it is early linen
    if not rule.relevant(code, names) and not (rule is keys and jax_only):
      continue
    r = (rule.Rule(names, report, needed, jax_only)
         if rule in (frozendict, keys) else rule.Rule(names, report, needed))
    r.code = code
    r.written = written
    new = _common.apply(r, module)
    if new is not module:
      module = new
      code = cst_util.code(new) if known is None else known.code(new)
  if needed:
    module = _common.add_imports(module, needed)
  return module


def _early(report):
  """Did the rules find a flax 0.3 pattern in the file (not ``jax_calls``)?"""
  return any(r['rule'].startswith('early_linen_') and
             r['rule'] != jax_calls.Rule.NAME for r in report.rewritten)


def _calls_init(module):
  import libcst as cst  # pylint: disable=g-import-not-at-top

  class Finder(cst.CSTVisitor):
    found = False

    def visit_Call(self, node):
      f = node.func
      if isinstance(f, cst.Attribute) and f.attr.value in (
          'init', 'init_with_output'):
        self.found = True

  finder = Finder()
  module.visit(finder)
  return finder.found


def keys_across_files(files, codebase):
  """The keys TODO in files that import only JAX and initialise a module of
  a codebase file importing flax.linen, where some file of the codebase
  shows a flax 0.3 pattern (a test pinning numbers of
  ``relative_position_biases.RelativePositionBiases(...).init(...)``): run
  after every file is rewritten (``api.upgrade_paths``).  ``files``: the
  SourceFiles, with ``new_code`` and ``report``."""
  if not any(_early(sf.report) for sf in files):
    return  # no flax 0.3 pattern in the codebase (the upgrade's own linen)
  linen = {rel for rel, f in codebase.files.items()
           if _common.LinenNames(f.imports).imports_module('flax.linen')}
  for sf in files:
    facts = codebase.files.get(sf.rel)
    code = sf.new_code
    if facts is None or code is None or keys.WHY in code or not (
        keys._INIT.search(code)):  # pylint: disable=protected-access
      continue
    names = _common.LinenNames(facts.imports)
    if names.imports_module('flax') or not names.imports_module('jax'):
      continue  # a flax file has its own (run; legacy: none); not JAX
    linen_locals = [local for local in facts.imports if getattr(
        codebase.imported_file(facts, local), 'path', None) in linen]
    if not linen_locals:
      continue
    import libcst as cst  # pylint: disable=g-import-not-at-top
    try:
      module = cst.parse_module(code)
    except cst.ParserSyntaxError:
      continue
    if not _calls_init(module):
      continue  # (``.init(`` in a docstring)
    new = _common.apply(keys.Rule(names, sf.report, set(), True,
                                  linen_locals), module)
    if new is not module:
      sf.new_code = new.code
