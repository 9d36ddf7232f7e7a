"""A file's generic rules (``Upgrader``): imports, removed JAX names,
legacy names left over, and the dispatch to the rules of legacy calls
(recurrent cells, local partials, module-level partials: rules/partials.py)
and of legacy module definitions (rules/modules.py, reached through
``ctx.convert_class`` / ``ctx.convert_function``: modules.py builds on this
module, so the driver, transform.py, hands its converters down in the
Context).

A module body's rewriter, ``ApplyRewriter``, is an ``Upgrader`` of its own
module (rules/apply_rewriter.py, its call cases in rules/apply/); what a
callee denotes, ``Resolver``, is rules/resolver.py's.
"""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import dependencies
from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade import emit as emit_lib
from flaxlegacy.upgrade import layer_table
from flaxlegacy.upgrade import walk
from flaxlegacy.upgrade.rules import _shared
from flaxlegacy.upgrade.rules import imports as imports_rule
from flaxlegacy.upgrade.rules import jax_names
from flaxlegacy.upgrade.rules import partial_calls
from flaxlegacy.upgrade.rules import partials
from flaxlegacy.upgrade.rules import initializer_partials
from flaxlegacy.upgrade.rules import recurrent
from flaxlegacy.upgrade.rules import stochastic_names
from flaxlegacy.upgrade.rules.resolver import Resolver  # pylint: disable=g-importing-member



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
# Methods of a legacy module class that a partial of it had too; a
# functools.partial has neither.
INSTANCE_METHODS = frozenset(('shared', 'call'))


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


class Upgrader(cst_util.TodoComments, walk.FastTransformer):
  """Generic rules: imports, removed JAX names, leftovers, and dispatch."""

  # function bodies here are plain code (not a module's apply, whose
  # rewriter resolves its locals itself)
  PLAIN_BODIES = True

  def __init__(self, ctx):
    super().__init__()
    self.ctx = ctx
    # writes the module rules' plans (upgrade/plans.py) as the target's code
    self.emit = emit_lib.emitter(ctx.target, self)
    self._todos = []  # stack of lists, one per open statement
    self._in_import = 0
    self._handled = set()  # ids of original nodes a rule consumed
    # id(Attribute) -> (legacy attr, code) of models.nn.X (visit -> leave)
    self._through = {}
    self._quals = []  # enclosing class / function names (flow.py scopes)
    # id(node) -> plan of rules/partial_calls.py (plain functions)
    self._partial_calls = {}
    # ids of Name nodes spelling a by-name legacy make_rng that name no
    # value (attribute names, keywords: rules/stochastic_names.py)
    self._stochastic_skip = set()

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

  def _legacy_partial(self, expr, by_name=True):
    """Whether ``expr`` (an original node) is ``X.partial(...)`` of a legacy
    module, or (``by_name``) a name whose values (flow.py) are all legacy
    modules (``.call`` of such a name: rules/drivers.py and the run-time
    life cycle rewrite it where it stays, so only ``.shared`` is asked)."""
    if isinstance(expr, cst.Call) and isinstance(
        expr.func, cst.Attribute) and expr.func.attr.value == 'partial':
      head = expr.func.value
      return bool(cst_util.legacy_attr(head, self.ctx.facts.nn_prefixes) or (
          isinstance(head, cst.Name) and self.ctx.codebase.module(
              self.ctx.facts, head.value)))
    if not by_name or not isinstance(expr, cst.Name):
      return False
    vals = self.flow_values(expr)
    return bool(vals) and all(v[0] in ('class', 'layer') for v in vals)

  def _prefix(self):
    """How this file spells the target's module: its legacy ``nn`` prefix
    (``flax.nn`` spelled out becomes the emitter's ``nn_module``,
    ``flax.linen``); module level and in module bodies."""
    prefixes = sorted(self.ctx.facts.nn_prefixes)
    p = prefixes[0] if prefixes else 'nn'
    module = self.emit.nn_module
    return p.replace('flax.deprecated.nn', module).replace('flax.nn', module)

  # -- bookkeeping --
  def rewrote(self, node, rule, what):
    self.ctx.report.rewritten.append(
        {'rule': rule, 'line': self.ctx.line(node), 'what': what})

  # -- imports --
  def visit_Import(self, node):
    self._in_import += 1

  def visit_ImportFrom(self, node):
    self._in_import += 1

  def _legacy_import_todo(self, original_node, updated_node):
    """An import of legacy API the program rules left: kept, with a TODO
    (legacy randomness imported by name is decided once the file is
    rewritten: rules/stochastic_names.py)."""
    deferred = stochastic_names.import_names(self, original_node)
    rest = (stochastic_names.without(updated_node, deferred) if deferred
            else updated_node)
    legacy = rest is not None and imports_rule.is_legacy_import(rest)
    if legacy:
      self.todo(original_node, f'{legacy} is legacy API outside module '
                'definitions, used here in a way the program-level rules do '
                'not rewrite')
    return updated_node

  def _shipped_functions_import(self, original_node, updated_node):
    """``from flax.deprecated.nn.attention import make_padding_mask`` (each
    name a legacy function flaxlegacy ships with its legacy interface,
    layer_table.LEGACY_FUNCTIONS) -> ``from flaxlegacy.migrate.
    upgraded_attention import legacy_make_padding_mask as
    make_padding_mask``: the local names stay, so their uses need no change
    (shipping.py points the import at the tree's copy).  None where any
    name is not such a function (the import keeps its TODO)."""
    if (original_node.module is None or original_node.relative
        or isinstance(original_node.names, cst.ImportStar)):
      return None
    mod = cst_util.dotted(original_node.module)
    homes, names = set(), []
    for a in original_node.names:
      attr = cst_util.legacy_nn_attr(f'{mod}.{cst_util.dotted(a.name)}')
      if attr not in layer_table.LEGACY_FUNCTIONS:
        return None
      home, _, helper = layer_table.LEGACY_FUNCTIONS[attr].rpartition('.')
      homes.add(home)
      local = a.asname.name.value if a.asname else cst_util.dotted(a.name)
      names.append(cst.ImportAlias(
          name=cst.Name(helper),
          asname=None if local == helper else cst.AsName(name=cst.Name(local))))
    if len(homes) != 1:
      return None
    home = homes.pop()
    for n in names:
      self.rewrote(original_node, 'layers', f'from {mod} import -> the '
                   f'legacy function, shipped ({n.name.value})')
      self.ctx.report.rewritten[-1]['shipped'] = f'{home}.{n.name.value}'
    return updated_node.with_changes(module=cst_util.expr(home), names=names)

  def _stale_dependency_todo(self, original_node, tops):
    stale = getattr(self.ctx.codebase, 'stale_dependencies', None)
    if not stale:
      return
    for top in dict.fromkeys(tops):
      if top in stale:
        self.todo(original_node, dependencies.why(top, stale[top]))

  def leave_Import(self, original_node, updated_node):
    self._in_import -= 1
    self._stale_dependency_todo(original_node, [
        cst_util.dotted(a.name).split('.')[0] for a in original_node.names])
    new = imports_rule.rewrite_import(
        updated_node, self.emit.nn_module) or jax_names.rename_import(
            updated_node, self.ctx.served)
    if new is not None:
      self.rewrote(original_node, 'imports', 'import -> linen / modern path')
      return new
    return self._legacy_import_todo(original_node, updated_node)

  def leave_ImportFrom(self, original_node, updated_node):
    self._in_import -= 1
    if original_node.module is not None and not original_node.relative:
      self._stale_dependency_todo(
          original_node, [cst_util.dotted(original_node.module).split('.')[0]])
    new = imports_rule.rewrite_import_from(updated_node,
                                           self.emit.nn_module)
    if new is not None:
      self.rewrote(original_node, 'imports', 'flax.nn -> flax.linen')
      return new
    new = self._shipped_functions_import(original_node, updated_node)
    if new is not None:
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
    return self._legacy_import_todo(original_node, updated_node)

  # -- legacy randomness imported by name (rules/stochastic_names.py) --
  def visit_Arg(self, node):
    if node.keyword is not None:
      stochastic_names.not_a_load(self, node.keyword)

  def leave_Name(self, original_node, updated_node):
    stochastic_names.leave_name(self, original_node)
    return updated_node

  # -- removed JAX names --
  def visit_Attribute(self, node):
    stochastic_names.not_a_load(self, node.attr)
    # nn.linear._conv_dimension_numbers: the module part is consumed too
    attr = cst_util.legacy_attr(node, self.ctx.facts.nn_prefixes)
    if (attr in layer_table.LEGACY_HELPERS or attr in SAME_ATTRS_IN_LINEN
        or attr in layer_table.LEGACY_FUNCTIONS):
      self._handled.add(id(node.value))
    elif (attr is None and isinstance(node.value, cst.Attribute)
          and id(node) not in self._handled
          and self._through.setdefault(
              id(node), self._through_module(node)) is not None):
      # models.nn.attention.X: its inner parts are no names of their own
      v = node.value
      while isinstance(v, cst.Attribute):
        self._handled.add(id(v))
        v = v.value
    elif (attr is not None and '.' not in attr
          and isinstance(node.value, cst.Attribute)
          and node.value.attr.value in cst_util.SUBMODULE_REEXPORTS
          and cst_util.legacy_attr(node.value, self.ctx.facts.nn_prefixes)
          == node.value.attr.value):
      # nn.linear.Dense is nn.Dense: its module part is no name of its own
      self._handled.add(id(node.value))
    return True

  def _through_module(self, node):
    """(legacy attr, code) of ``models.nn.X``: legacy flax.nn reached
    through a codebase module's own import of it (protein_lm's test calls
    ``modules.nn.attention.dot_product_attention``), else None."""
    v = node.value
    while isinstance(v, cst.Attribute) and isinstance(v.value, cst.Attribute):
      v = v.value
    if not (isinstance(v, cst.Attribute) and isinstance(v.value, cst.Name)):
      return None
    other = self.ctx.codebase.imported_file(self.ctx.facts, v.value.value)
    if other is None or v.attr.value not in other.nn_prefixes:
      return None
    code = cst_util.dotted(node)
    if code is None:
      return None
    rest = code[len(v.value.value) + 1:]
    return cst_util.legacy_attr(cst_util.expr(rest),
                                other.nn_prefixes), code

  def _shipped_function(self, node, attr, code):
    """A legacy function flaxlegacy ships with its legacy interface
    (layer_table.LEGACY_FUNCTIONS), imported by its name."""
    full = layer_table.LEGACY_FUNCTIONS[attr]
    self.ctx.needed_imports.add(full)
    self.rewrote(node, 'layers', f'{code} -> the legacy function, shipped '
                 f'({full.rsplit(".", 1)[1]})')
    self.ctx.report.rewritten[-1]['shipped'] = full
    return cst.Name(full.rsplit('.', 1)[1])

  def leave_Attribute(self, original_node, updated_node):
    if self._in_import:
      return updated_node
    if (isinstance(original_node.value, cst.Attribute)
        and id(original_node) not in self._handled):
      through = self._through.pop(id(original_node), None)
      if through is not None and through[0]:
        attr, code = through
        self._handled.add(id(original_node.value))
        if attr in layer_table.LEGACY_FUNCTIONS:
          return self._shipped_function(original_node, attr, code)
        if (attr not in SAME_ATTRS_IN_LINEN
            and attr.split('.')[0] not in SAME_IN_LINEN):
          self.todo(original_node, f'{code}: legacy flax.nn reached through '
                    "another module's import of it (linen there now): no "
                    'certain rewrite here')
        return updated_node
    full = cst_util.dotted(original_node)
    if full in cst_util.LEGACY_NN_MODULES and full in self.ctx.facts.nn_prefixes:
      # ``import flax`` ... ``flax.nn.Dense``: the target's module, spelled
      # out
      return jax_names.expr(self.emit.nn_module)
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
    if attr in layer_table.LEGACY_FUNCTIONS and (
        id(original_node) not in self._handled):
      return self._shipped_function(original_node, attr, f'nn.{attr}')
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
    elif (original_node.attr.value in INSTANCE_METHODS
          and id(original_node) not in self._handled
          and (self.ctx.facts.nn_prefixes or self.ctx.codebase.modules)
          and self._legacy_partial(
              original_node.value,
              by_name=original_node.attr.value == 'shared')):
      # ``nn.Conv.partial(...).shared(...)`` outside a module's apply: the
      # partial became functools.partial, which has no such method
      self.todo(original_node, f'{self.ctx.code_of(original_node)}: a legacy '
                f'module\'s .{original_node.attr.value} outside a module '
                'definition; linen has none (build the module once, in a '
                'compact method, and call it where the shared instance was '
                'used)' if original_node.attr.value == 'shared' else
                f'{self.ctx.code_of(original_node)}: a legacy module\'s '
                '.call outside a module definition; linen has none (use '
                'Module.apply with the parameters)')
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
    partials.module_level_partial_visit(self, node)
    recurrent.visit_call(self, node)
    return True

  def leave_Call(self, original_node, updated_node):
    for case in FILE_CALL_CASES:
      new = case(self, original_node, updated_node)
      if new is not None:
        return new
    return updated_node

  def _call_jax_name(self, original_node, updated_node):
    """A call of a name JAX removed, or whose keywords it renamed
    (rules/jax_names.py), else None."""
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
    return None

  def _call_local_partial(self, original_node, updated_node):
    """A call of a local partial in a plain function
    (rules/partial_calls.py), else None."""
    plan = self._partial_calls.get(id(original_node))
    if plan is not None:
      if plan[0] == 'todo':
        self.todo(original_node, plan[1])
        return updated_node
      return partial_calls.rewrite_call(self, original_node, updated_node,
                                        *plan[1])
    return None

  def _call_module_outside_body(self, original_node, updated_node):
    """A call of a legacy module class of the codebase outside module
    bodies (a plain function the layer-function rule did not take: used
    as a value, a callback, called from code that is no module body; the
    functions and lambdas it takes draw their auto-names from the running
    body's counter, rules/autoname_stack.py): a TODO, else None.  Legacy bound it to the
    module whose ``apply`` ran; in linen ``Block(x, features=...)`` builds
    a module from its fields (a TypeError, or a module never called)."""
    f = original_node.func
    if (type(self).leave_Call is not Upgrader.leave_Call
        or not isinstance(f, (cst.Name, cst.Attribute))
        or id(f) in self._handled):
      return None
    values = self.flow_values(f)
    # a class of the codebase that is not a legacy module among the values
    # ('cls': a Keras model where a legacy network is bound too, by name)
    # says the call may be of another framework's class: left as it is
    if (not values or not any(v[0] == 'class' for v in values)
        or any(v[0] == 'cls' for v in values)):
      return None
    written = getattr(self.ctx, 'written', None)
    if written is not None and written.get(original_node) is None:
      return None  # a construction the program rules wrote (``Net()``)
    new = self._named_module_outside_body(original_node, updated_node,
                                          values)
    if new is not None:
      return new
    self.todo(original_node, f'{self.ctx.code_of(f)}(...): a legacy module '
              'called outside a module body; linen builds a module from '
              'its fields and calls it with its inputs, inside a compact '
              'method: port this function by hand (or call the module from '
              'the body that uses it)')
    return updated_node

  def _named_module_outside_body(self, original, updated, values):
    """``Tag(x, name='mean_query')`` in a plain function (protein_lm's
    attention function of a test, handed to the model): a call with a
    ``name=`` needs no auto-name, so it is built and called where it runs,
    keywords split by the class's fields when it runs
    (``_legacy_module_call``, a RuntimeSubmoduleCall): inside a compact
    method it is that module's child, as legacy bound it to the module
    whose ``apply`` ran; outside any, linen refuses it, as legacy did.
    Only for one input and keywords, every value a converted module class
    whose first parameter is that input; else None (the TODO)."""
    args = list(updated.args)
    positional = [a for a in args if a.keyword is None]
    if (len(positional) != 1 or args[0] is not positional[0]
        or any(a.star for a in args)
        or not any(cst_util.kw(a) == 'name' for a in args)
        or not all(v[0] == 'class' for v in values)):
      return None
    for v in values:
      f = self.ctx.codebase.files.get(v[1])
      info = f.modules.get(v[2]) if f is not None else None
      if (info is None or info.problems or not info.params
          or info.params[0] in info.fields or info.var_kw
          or set(info.fields) & _shared.RESERVED_FIELDS):
        return None  # (a reserved field: the class stays legacy, a TODO)
    self.rewrote(original, 'runtime_modules', 'named legacy module call '
                 'outside a module body -> built and called where it runs')
    return self.emit.runtime_submodule_call(plans.RuntimeSubmoduleCall(
        module=updated.func, input=positional[0],
        keywords=tuple(args[1:]), name=None))

  def _call_module_level_partial(self, original_node, updated_node):
    """``X.partial(...)`` outside module bodies (rules/partials.py); an X
    not known as a legacy module gets a TODO (the last case: always
    answers)."""
    new = partials.module_level_partial_leave(self, original_node, updated_node)
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
    return self.ctx.convert_class(self, original_node, info)

  def visit_FunctionDef(self, node):
    top = not self._quals
    self._quals.append(node.name.value)
    info = self.ctx.facts.modules.get(node.name.value)
    if info is not None and info.kind == 'function':
      return False
    convert = getattr(self.ctx, 'convert_layer_function', None)
    if top and self.PLAIN_BODIES and convert is not None:
      # (rules/layer_functions.py, through the context: no import cycle)
      new = convert(self, node)
      if new is not None:  # a plain function building layers for modules
        self._layer_functions = getattr(self, '_layer_functions', {})
        self._layer_functions[id(node)] = new
        return False
    if self.PLAIN_BODIES and (self.ctx.facts.nn_prefixes
                              or self.ctx.codebase.modules):
      # a helper that builds submodules from a local partial
      # (rules/partial_calls.py)
      self._partial_calls.update(partial_calls.scan(
          self, node, Resolver(self, {})))
    return True

  def leave_FunctionDef(self, original_node, updated_node):
    self._quals.pop()
    done = getattr(self, '_layer_functions', {}).pop(id(original_node), None)
    if done is not None:
      return done
    info = self.ctx.facts.modules.get(original_node.name.value)
    if info is None or info.kind != 'function':
      return updated_node
    return self.ctx.convert_function(self, original_node, info)


# pylint: disable=protected-access
# The cases of a call in a file, in the order they are tried (the first
# answer that is not None wins; the last always answers).  A module body's
# rewriter (rules/apply_rewriter.py) tries them between its own.
FILE_CALL_CASES = (
    recurrent.leave_call,
    initializer_partials.leave_call,
    Upgrader._call_jax_name,
    Upgrader._call_local_partial,
    Upgrader._call_module_outside_body,
    Upgrader._call_module_level_partial,
)
# pylint: enable=protected-access
