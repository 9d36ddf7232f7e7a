"""The file-level transformer: runs every rule over one parsed file.

Rules that are unsure leave the code as it was and attach
``# TODO(flaxlegacy upgrade): <why>`` to the enclosing statement (once: a
second run finds the comment and adds nothing).
"""

import re

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import layer_table
from flaxlegacy.upgrade.cst_util import add_defs  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.cst_util import add_imports  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.positions import LazyPositions
from flaxlegacy.upgrade.rules import imports as imports_rule
from flaxlegacy.upgrade.rules import jax_names

# Legacy ``nn.X`` names that linen spells and computes the same.
SAME_IN_LINEN = frozenset(
    ('Module', 'initializers', 'activation', 'max_pool', 'avg_pool', 'celu',
     'elu', 'gelu', 'glu', 'leaky_relu', 'log_sigmoid', 'log_softmax', 'relu',
     'sigmoid', 'soft_sign', 'softmax', 'softplus', 'swish', 'tanh', 'silu',
     'compact'))
# Legacy flax.nn names under a submodule whose linen namesake (the same
# path under flax.linen) is the same value: ``nn.linear.default_kernel_init``
# is ``lecun_normal()`` in both.
SAME_ATTRS_IN_LINEN = frozenset(('linear.default_kernel_init',))
PROGRAM_METHODS = frozenset(('init', 'init_by_shape', 'call', 'create',
                             'create_by_shape'))
# Methods only legacy modules have: any call left after the program rules
# is legacy code whatever its receiver.
LEGACY_ONLY_METHODS = frozenset(('init_by_shape', 'create_by_shape'))


_LINEN_NAMES = []


def _in_linen(name):
  """Whether today's flax.linen has ``name`` (a kept legacy name that it
  lacks keeps its legacy spelling).  Read from linen's ``__init__.py``
  without importing it (importing flax.linen costs seconds)."""
  if not _LINEN_NAMES:
    import ast  # pylint: disable=g-import-not-at-top
    import importlib.util  # pylint: disable=g-import-not-at-top
    import os  # pylint: disable=g-import-not-at-top
    names = set()
    spec = importlib.util.find_spec('flax')
    init = os.path.join(os.path.dirname(spec.origin), 'linen', '__init__.py')
    with open(init, encoding='utf-8') as f:
      tree = ast.parse(f.read())
    for node in ast.walk(tree):
      if isinstance(node, (ast.Import, ast.ImportFrom)):
        for a in node.names:
          names.add(a.asname or a.name.split('.')[0])
      elif isinstance(node, ast.Assign):
        names.update(t.id for t in node.targets if isinstance(t, ast.Name))
      elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        names.add(node.name)
    # and its submodules (flax.linen.initializers, .linear ...)
    for f in os.listdir(os.path.dirname(init)):
      stem, ext = os.path.splitext(f)
      if ext == '.py' or os.path.isdir(os.path.join(os.path.dirname(init),
                                                    f)):
        names.add(stem)
    _LINEN_NAMES.append(frozenset(names))
  return name in _LINEN_NAMES[0]


class FileReport:

  def __init__(self):
    self.rewritten = []
    self.left = []
    self.error = None
    self.modules = []
    self.renames = []  # --names linen: one rename-map entry per class

  def as_dict(self):
    return {'rewritten': self.rewritten, 'left': self.left,
            'modules': [m['class'] for m in self.modules],
            'error': self.error}


class Context:
  """What every transformer of one file shares."""

  def __init__(self, file_facts, codebase, report, positions, code_of):
    self.facts = file_facts
    self.codebase = codebase
    self.report = report
    self.positions = positions
    self.code_of = code_of
    self.needed_imports = set()  # 'functools', 'itertools', 'typing.Any'
    # name -> source of a small function the rewritten code calls, written
    # once into the file after its imports (rules/splat.py)
    self.needed_defs = {}
    self.line_offset = 0
    # removed module -> what it becomes in this file (rules/early_linen/
    # removed_modules.py ``served_renames``)
    self.served = {}

  def line(self, node):
    pos = self.positions.get(node)
    return pos.start.line + self.line_offset if pos is not None else None


class Upgrader(cst_util.TodoComments, cst.CSTTransformer):
  """Generic rules: imports, removed JAX names, leftovers, and dispatch."""

  # function bodies here are plain code (not a module's apply, whose
  # rewriter resolves its locals itself)
  PLAIN_BODIES = True

  def __init__(self, ctx):
    super().__init__()
    self.ctx = ctx
    self._todos = []  # stack of lists, one per open statement
    self._in_import = 0
    self._handled = set()  # ids of original nodes a rule consumed
    self._quals = []  # enclosing class / function names (flow.py scopes)
    # id(node) -> plan of rules/partial_calls.py (plain functions)
    self._partial_calls = {}

  def qual(self):
    """The flow.py scope name of the code being visited."""
    return '.'.join(self._quals)

  def flow_values(self, expr):
    """What ``expr`` (an original node) can hold (flow.py), or None when
    there are no codebase facts."""
    flow = getattr(self.ctx.codebase, 'flow', None)
    if flow is None:
      return None
    return flow.values_of(self.ctx.facts.path, self.qual(), expr)

  # -- bookkeeping --
  def rewrote(self, node, rule, what):
    self.ctx.report.rewritten.append(
        {'rule': rule, 'line': self.ctx.line(node), 'what': what})

  # -- imports --
  def visit_Import(self, node):
    self._in_import += 1

  def visit_ImportFrom(self, node):
    self._in_import += 1

  def leave_Import(self, original_node, updated_node):
    self._in_import -= 1
    new = imports_rule.rewrite_import(updated_node) or jax_names.rename_import(
        updated_node, self.ctx.served)
    if new is not None:
      self.rewrote(original_node, 'imports', 'import -> linen / modern path')
      return new
    legacy = imports_rule.is_legacy_import(updated_node)
    if legacy:
      self.todo(original_node, f'{legacy} is legacy API outside module '
                'definitions, used here in a way the program-level rules do '
                'not rewrite')
    return updated_node

  def leave_ImportFrom(self, original_node, updated_node):
    self._in_import -= 1
    new = imports_rule.rewrite_import_from(updated_node)
    if new is not None:
      self.rewrote(original_node, 'imports', 'flax.nn -> flax.linen')
      return new
    for q in jax_names.unmovable_imports(original_node):
      self.todo(original_node, f'{q} was removed; no import provides it '
                f'today: use {jax_names.NAME_RENAMES[q].replace("builtins.", "")}'
                ' where it is used')
    for a in ([] if isinstance(original_node.names, cst.ImportStar)
              or original_node.module is None or original_node.relative
              else original_node.names):
      q = f'{cst_util.dotted(original_node.module)}.{cst_util.dotted(a.name)}'
      # the import itself fails today (a removed module: its own rule,
      # rules/early_linen/removed_modules.py)
      if q in jax_names.UNSURE and q not in jax_names.REMOVED_MODULES:
        self.todo(original_node, jax_names.UNSURE[q])
    new = jax_names.rename_import_from(updated_node, self.ctx.served)
    if new is not None:
      self.rewrote(original_node, 'jax_names', 'import of a removed JAX / NumPy / Python name')
      return new
    legacy = imports_rule.is_legacy_import(updated_node)
    if legacy:
      self.todo(original_node, f'{legacy} is legacy API outside module '
                'definitions, used here in a way the program-level rules do '
                'not rewrite')
    return updated_node

  # -- removed JAX names --
  def visit_Attribute(self, node):
    # nn.linear._conv_dimension_numbers: the module part is consumed too
    attr = cst_util.legacy_attr(node, self.ctx.facts.nn_prefixes)
    if attr in layer_table.LEGACY_HELPERS or attr in SAME_ATTRS_IN_LINEN:
      self._handled.add(id(node.value))
    return True

  def leave_Attribute(self, original_node, updated_node):
    if self._in_import:
      return updated_node
    full = cst_util.dotted(original_node)
    if full in cst_util.LEGACY_NN_MODULES and full in self.ctx.facts.nn_prefixes:
      # ``import flax`` ... ``flax.nn.Dense``: the linen module, spelled out
      return jax_names.expr('flax.linen')
    q = jax_names.qualify(original_node, self.ctx.facts.imports)
    moved = jax_names.rename_module_attribute(original_node,
                                              self.ctx.facts.imports,
                                              self.ctx.served)
    if moved is not None:
      target = self.ctx.served.get(q) or jax_names.MODULE_RENAMES[q]
      self.rewrote(original_node, 'jax_names', f'{q} -> {target}')
      if target.startswith('flaxlegacy.') or q in self.ctx.served:
        # the layer's stand-in (jax.lib.xla_bridge): imported by name, so
        # that shipping.py copies it beside the code like other helpers;
        # jax.lib.xla_client -> jaxlib.xla_client, as the import says
        self.ctx.needed_imports.add(target)
        return cst.Name(target.rpartition('.')[2])
      return moved
    if q in jax_names.RENAMES:
      self.rewrote(original_node, 'jax_names', f'{q} -> '
                   f'{jax_names.RENAMES[q]}')
      return jax_names.expr(jax_names.spell(jax_names.RENAMES[q],
                                            self.ctx.facts.imports))
    if q in jax_names.NAME_RENAMES:
      src, need = jax_names.today(jax_names.NAME_RENAMES[q],
                                  self.ctx.facts.imports)
      if need:
        self.ctx.needed_imports.add('import ' + need)
      self.rewrote(original_node, 'jax_names', f'{q} -> {src}')
      return jax_names.expr(src)
    if q in jax_names.UNSURE and id(original_node) not in self._handled:
      self.todo(original_node, jax_names.UNSURE[q])
    attr = cst_util.legacy_attr(original_node, self.ctx.facts.nn_prefixes)
    if attr in layer_table.LEGACY_HELPERS:
      fn = layer_table.LEGACY_HELPERS[attr]
      full = f'flaxlegacy.migrate.upgraded_layers.{fn}'
      self.ctx.needed_imports.add('flaxlegacy.migrate.upgraded_layers')
      self.rewrote(original_node, 'layers', f'nn.{attr} -> upgraded_layers.'
                   f'{fn}')
      self.ctx.report.rewritten[-1]['shipped'] = full
      return jax_names.expr(f'upgraded_layers.{fn}')
    if (attr is not None and id(original_node) not in self._handled
        and attr not in SAME_ATTRS_IN_LINEN):
      head = attr.split('.')[0]
      if head not in SAME_IN_LINEN:
        why = layer_table.UNSUPPORTED_LAYERS.get(head)
        self.todo(original_node, f'nn.{attr}: ' + (
            why or 'no certain linen rewrite here'))
        if (not _in_linen(head) and isinstance(original_node.value,
                                                cst.Attribute)
            and not updated_node.value.deep_equals(original_node.value)):
          # kept legacy code keeps its legacy spelling (flax.nn.Model):
          # never renamed into a linen name that does not exist
          return updated_node.with_changes(value=original_node.value)
    elif (isinstance(original_node.value, cst.Name)
          and self.ctx.codebase.module(self.ctx.facts,
                                      original_node.value.value)
          and original_node.attr.value in PROGRAM_METHODS
          and self.ctx.facts.nn_prefixes):
      self.todo(original_node, f'{original_node.value.value}.'
                f'{original_node.attr.value}: legacy module life cycle is '
                'program-level, in a form the program-level rules do not '
                'rewrite')
    elif (original_node.attr.value in LEGACY_ONLY_METHODS
          and (self.ctx.facts.nn_prefixes or self.ctx.codebase.modules)):
      # Left by the program rules (they rewrite those on a module they
      # know): on a table entry, a parameter ... the module is not known
      # here, and linen modules have no such method.
      self.todo(original_node, f'{self.ctx.code_of(original_node)}: legacy '
                'module life cycle on an object not known here to be a '
                'module; linen modules have no such method (use '
                'Module.init / Module.apply)')
    return updated_node

  def visit_Call(self, node):
    q = jax_names.qualify(node.func, self.ctx.facts.imports)
    if q in jax_names.CALLS or q in jax_names._CALL_FORMS:  # pylint: disable=protected-access
      self._handled.add(id(node.func))
    from flaxlegacy.upgrade.rules import modules  # pylint: disable=g-import-not-at-top
    from flaxlegacy.upgrade.rules import recurrent  # pylint: disable=g-import-not-at-top
    modules.module_level_partial_visit(self, node)
    recurrent.visit_call(self, node)
    return True

  def leave_Call(self, original_node, updated_node):
    from flaxlegacy.upgrade.rules import recurrent  # pylint: disable=g-import-not-at-top
    new = recurrent.leave_call(self, original_node, updated_node)
    if new is not None:
      return new
    q = jax_names.qualify(original_node.func, self.ctx.facts.imports)
    if q in jax_names.CALLS:
      new = jax_names.rewrite_call(updated_node, q, self.ctx.facts.imports,
                                   self.ctx.code_of)
      if new is None:
        self.todo(original_node, f'{q} was removed from JAX; this call form '
                  'has no certain rewrite')
        return updated_node
      self.rewrote(original_node, 'jax_names', f'{q}(...) rewritten')
      return new
    if q in jax_names._CALL_FORMS:  # pylint: disable=protected-access
      new = jax_names.rewrite_call_form(updated_node, q,
                                        self.ctx.facts.imports,
                                        self.ctx.code_of)
      if new is None:
        self.todo(original_node, jax_names.UNSURE[q])
        return updated_node
      self.rewrote(original_node, 'jax_names', f'{q}(...) rewritten')
      return new
    if q in jax_names.KEYWORD_RENAMES:
      new = jax_names.rewrite_keywords(updated_node, q, self.ctx.code_of)
      if new is False:
        self.todo(original_node, f'{q}: the keyword arguments JAX renamed '
                  f'({", ".join(jax_names.KEYWORD_RENAMES[q][0])}) are given '
                  'in a form the upgrade cannot rename with certainty')
        return updated_node
      if new is not None:
        self.rewrote(original_node, 'jax_names', f'{q}(...) keywords renamed')
        return new
    plan = self._partial_calls.get(id(original_node))
    if plan is not None:
      if plan[0] == 'todo':
        self.todo(original_node, plan[1])
        return updated_node
      from flaxlegacy.upgrade.rules import partial_calls  # pylint: disable=g-import-not-at-top
      return partial_calls.rewrite_call(self, original_node, updated_node,
                                        *plan[1])
    from flaxlegacy.upgrade.rules import modules  # pylint: disable=g-import-not-at-top
    new = modules.module_level_partial_leave(self, original_node,
                                             updated_node)
    f = original_node.func
    # (only here: a subclass with a leave_Call of its own, the module-body
    # rewriter, resolves the .partial of its locals after this returns)
    if (new is updated_node and isinstance(f, cst.Attribute)
        and type(self).leave_Call is Upgrader.leave_Call
        and f.attr.value == 'partial'
        and 'functools' not in (
            cst_util.dotted(f.value),
            jax_names.qualify(f.value, self.ctx.facts.imports))
        and (self.ctx.facts.nn_prefixes or self.ctx.codebase.modules)):
      # X.partial(...) of something the rules do not know as a legacy
      # module (a parameter, a table entry): linen modules have no
      # .partial, and the rules cannot tell a module from anything else.
      why = getattr(self, 'partial_why', {}).get(id(original_node))
      self.todo(original_node, f'{self.ctx.code_of(f)}(...): ' + (
          why if why else 'not known here to be a legacy module; if it is '
          'one, use functools.partial(X, ...)'))
    return new

  # -- module definitions (rules/modules.py) --
  def visit_ClassDef(self, node):
    self._quals.append(node.name.value)
    info = self.ctx.facts.modules.get(node.name.value)
    if info is not None and info.kind == 'class':
      return False  # converted as a whole in leave_ClassDef
    return True

  def leave_ClassDef(self, original_node, updated_node):
    self._quals.pop()
    info = self.ctx.facts.modules.get(original_node.name.value)
    if info is None or info.kind != 'class':
      return updated_node
    dup = [p for p in info.problems if p.startswith('two module classes')]
    if dup:
      self.todo(original_node, f'{info.name}: {dup[0]}; rename one of them '
                'or port by hand')
      return updated_node
    from flaxlegacy.upgrade.rules import modules  # pylint: disable=g-import-not-at-top
    return modules.convert_class(self, original_node, info)

  def visit_FunctionDef(self, node):
    self._quals.append(node.name.value)
    info = self.ctx.facts.modules.get(node.name.value)
    if info is not None and info.kind == 'function':
      return False
    if self.PLAIN_BODIES and (self.ctx.facts.nn_prefixes
                              or self.ctx.codebase.modules):
      # a helper that builds submodules from a local partial
      # (rules/partial_calls.py)
      from flaxlegacy.upgrade.rules import modules  # pylint: disable=g-import-not-at-top
      from flaxlegacy.upgrade.rules import partial_calls  # pylint: disable=g-import-not-at-top
      self._partial_calls.update(partial_calls.scan(
          self, node, modules.Resolver(self, {})))
    return True

  def leave_FunctionDef(self, original_node, updated_node):
    self._quals.pop()
    info = self.ctx.facts.modules.get(original_node.name.value)
    if info is None or info.kind != 'function':
      return updated_node
    from flaxlegacy.upgrade.rules import modules  # pylint: disable=g-import-not-at-top
    return modules.convert_function(self, original_node, info)


def parse(code):
  return cst.parse_module(code)


def _relevance(file_facts, codebase):
  """A regex matching statement text that some rule may rewrite."""
  from flaxlegacy.upgrade.rules import jax_names  # pylint: disable=g-import-not-at-top
  words = set()
  for q in list(jax_names.RENAMES) + list(jax_names.UNSURE) + list(
      jax_names.CALLS) + list(jax_names.MODULE_RENAMES):
    words.add(q.rsplit('.', 1)[-1])
  words.update(file_facts.modules)
  words.update(file_facts.partial_helpers)
  for f in codebase.files.values():
    words.update(f.modules)
  words.update(p.split('.')[-1] for p in file_facts.nn_prefixes)
  alternatives = [r'\bimport\b', r'\.partial\b', 'jax\\.config',
                  r'_by_shape\b']
  removed = jax_names.removed_name_pattern(file_facts.imports)
  if removed:
    alternatives.append(removed)
  alternatives += [r'\b' + re.escape(w) + r'\b' for w in sorted(words)]
  return re.compile('|'.join(alternatives))


def upgrade_module(path, module, codebase, report, statement_texts=None,
                   code=None):
  """Rewrites one parsed file; returns the new source.

  ``code``: the source ``module`` was parsed from, if the caller has it
  (saves generating it again while the module is unchanged).

  Only top-level statements whose text matches ``_relevance`` are walked;
  positions (for the report's line numbers) are resolved per walked
  statement.
  """
  file_facts = codebase.files[path]
  # Program-level rules first (rules/programs.py), on the legacy
  # source, then the module rules on the result.
  from flaxlegacy.upgrade.rules import programs  # pylint: disable=g-import-not-at-top
  if programs.relevant(file_facts, codebase, path):
    pctx = Context(file_facts, codebase, report, LazyPositions(module),
                   module.code_for_node)
    try:
      new_module = programs.run(pctx, module)
    except Exception as e:  # pylint: disable=broad-except
      # A program-level construct the pass does not know: the module rules
      # still run; the report says what was not rewritten.
      report.left.append({'line': None, 'why': 'program-level rules failed '
                          f'on this file ({type(e).__name__}: '
                          f'{str(e).splitlines()[0] if str(e) else ""}); '
                          'program code left as it was'})
      new_module = module
    if not new_module.deep_equals(module):
      module, statement_texts, code = new_module, None, None
  from flaxlegacy.upgrade.rules import array_keys  # pylint: disable=g-import-not-at-top
  new_module = array_keys.run(file_facts, report, module, code)
  if new_module is not module:
    module, statement_texts, code = new_module, None, None
  from flaxlegacy.upgrade.rules import value_initializers  # pylint: disable=g-import-not-at-top
  new_module = value_initializers.run(report, module, code)
  if new_module is not module:
    module, statement_texts, code = new_module, None, None
  ctx = Context(file_facts, codebase, report, {}, module.code_for_node)
  upgrader = Upgrader(ctx)
  if statement_texts is None:
    statement_texts = [module.code_for_node(s) for s in module.body]
  from flaxlegacy.upgrade.rules.early_linen import removed_modules  # pylint: disable=g-import-not-at-top
  if any(m.rsplit('.', 1)[-1] in t for t in statement_texts
         for m in removed_modules.STAND_INS):
    ctx.served = removed_modules.served_renames(''.join(statement_texts),
                                                file_facts.imports)
  relevant = _relevance(file_facts, codebase)
  line = 1 + sum(1 for _ in module.header)
  body = []
  changed = False
  for stmt, text in zip(module.body, statement_texts):
    if relevant.search(text):
      ctx.positions = LazyPositions(cst.Module(body=[stmt]))
      ctx.line_offset = line - 1
      new = stmt.visit(upgrader)
      changed = changed or new is not stmt
      body.append(new)
    else:
      body.append(stmt)
    line += text.count('\n')
  new = module.with_changes(body=body) if changed else module
  if ctx.needed_imports:
    new = add_imports(new, ctx.needed_imports)
  if ctx.needed_defs:
    new = add_defs(new, ctx.needed_defs)
  # Removed jax.test_util helpers in test files (rules/test_util.py).
  from flaxlegacy.upgrade.rules import test_util  # pylint: disable=g-import-not-at-top
  new = test_util.run(ctx, new)
  # Early linen (flax 0.3.x) last: its rules read the imports as written
  # (names of legacy flax.nn are never theirs) and may add lines, which
  # would shift the line numbers the rules above report.
  from flaxlegacy.upgrade.rules import early_linen  # pylint: disable=g-import-not-at-top
  code = code if new is module and code is not None else new.code
  out = early_linen.run(file_facts, report, new, code)
  return code if out is new else out.code
