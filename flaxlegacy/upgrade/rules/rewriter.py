"""The rewriters: a file's generic rules (``Upgrader``) and a module body's
(``ApplyRewriter``), with ``Resolver`` (what a callee denotes).

``Upgrader`` walks a whole file: imports, removed JAX names, legacy names
left over, and the dispatch to the rules of legacy calls (recurrent cells,
local partials, module-level partials) and of legacy module definitions
(rules/modules.py, reached through ``ctx.convert_class`` /
``ctx.convert_function``: modules.py builds on this module, so the driver,
transform.py, hands its converters down in the Context).

``ApplyRewriter`` is an ``Upgrader`` over one ``apply`` body (or
``@nn.module`` function body); rules/modules.py documents what it rewrites.
"""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import flow as flow_lib
from flaxlegacy.upgrade import layer_table
from flaxlegacy.upgrade import walk
from flaxlegacy.upgrade.collectors import aliases as alias_facts
from flaxlegacy.upgrade.rules import _shared
from flaxlegacy.upgrade.rules import aliases as aliases_rule
from flaxlegacy.upgrade.rules import attention as attention_rule
from flaxlegacy.upgrade.rules import attention_cache
from flaxlegacy.upgrade.rules import drivers
from flaxlegacy.upgrade.rules import imports as imports_rule
from flaxlegacy.upgrade.rules import jax_names
from flaxlegacy.upgrade.rules import linen_names
from flaxlegacy.upgrade.rules import name_plan
from flaxlegacy.upgrade.rules import partial_calls
from flaxlegacy.upgrade.rules import partial_locals
from flaxlegacy.upgrade.rules import recurrent
from flaxlegacy.upgrade.rules import runtime_modules
from flaxlegacy.upgrade.rules import splat
from flaxlegacy.upgrade.rules import subclasses


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


class Upgrader(cst_util.TodoComments, walk.FastTransformer):
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
    module_level_partial_visit(self, node)
    recurrent.visit_call(self, node)
    return True

  def leave_Call(self, original_node, updated_node):
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
      return partial_calls.rewrite_call(self, original_node, updated_node,
                                        *plan[1])
    new = module_level_partial_leave(self, original_node, updated_node)
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
    self._quals.append(node.name.value)
    info = self.ctx.facts.modules.get(node.name.value)
    if info is not None and info.kind == 'function':
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
    info = self.ctx.facts.modules.get(original_node.name.value)
    if info is None or info.kind != 'function':
      return updated_node
    return self.ctx.convert_function(self, original_node, info)


class Resolver:
  """What a callee expression denotes, in one body."""

  def __init__(self, up, local_vars, flow_ok=True):
    self.up = up
    self.locals = local_vars
    self.why_not = {}  # name -> why a call of it is not rewritten
    # flow.py facts are about the legacy source's nodes: only for
    # expressions of the original tree
    self.flow_ok = flow_ok
    # off while a body's local aliases are being resolved (_LocalScan):
    # a local not known yet is not an unknown value
    self.flow_names = True
    # how the expression being resolved is used: called (None) or
    # ``X.partial(...)`` ... (flow.usable: what a working program can hold)
    self.use = None

  def used_as(self, expr, use):
    """``self(expr)`` for an expression used as ``expr.<use>(...)``."""
    saved, self.use = self.use, use
    try:
      return self(expr)
    finally:
      self.use = saved

  def from_flow(self, expr):
    """(Ref or None, why or None) from what ``expr`` can hold."""
    values = self.up.flow_values(expr) if hasattr(self.up,
                                                   'flow_values') else None
    if values is None:
      return None, None
    name = self.up.ctx.code_of(expr)
    if isinstance(expr, cst.Name):
      flow = self.up.ctx.codebase.flow
      why = flow.contradiction(self.up.ctx.facts.path, self.up.qual(),
                               expr.value)
      if why:  # --observe: the run and the source disagree
        return None, f'{name!r}: {why}; rewrite its uses by hand'
    choice, why = flow_lib.module_choice(self.up.ctx.codebase, values,
                                         use=self.use)
    if choice is None:
      return None, (f'{name!r}: {why}; rewrite its uses by hand' if why
                    else None)
    if choice[0] == 'layer':
      layer = layer_table.LAYERS.get(choice[1])
      if layer is None or layer.linen in layer_table.SHIPPED:
        return None, (f'{name!r} holds legacy {choice[1]}, which this '
                      'upgrade does not pass around')
      missing = [k for k in layer.add_kwargs
                 if any(k not in kws for kws in choice[2])]
      if missing and any(choice[2]):
        return None, (f'{name!r} holds legacy {choice[1]}, sometimes '
                      f'without {missing}, which linen needs for the legacy '
                      'numbers')
      inner = _shared.Ref('layer', layer, None)
      return (_shared.Ref('partial', inner, None) if any(choice[2]) else inner), None
    return _shared.Ref('class', choice[1][0], 'field'), None

  def __call__(self, expr):
    ctx = self.up.ctx
    attr = cst_util.legacy_attr(expr, ctx.facts.nn_prefixes)
    if attr is not None:
      if attention_rule.legacy_name(attr):
        return _shared.Ref('attention', attr, None)
      if attr in layer_table.LAYERS:
        return _shared.Ref('layer', layer_table.LAYERS[attr], None)
      if attr == 'dropout':
        return _shared.Ref('dropout', None, None)
      return None
    if isinstance(expr, cst.Name):
      if expr.value in self.locals:
        return self.locals[expr.value]
      # a hyper-parameter holding a module; an alias X = M.partial(...)
      ref, why = aliases_rule.resolve_field_module(self, expr.value)
      if ((ref is not None and ref.kind == 'class' or why)
          and self.use is None and self.flow_ok
          and hasattr(self.up, 'flow_values')):
        # the classes the codebase gives it (flow.py) may split their
        # keywords otherwise than its default does: split at run time
        ref2, why2 = runtime_modules.check(self.up.ctx.codebase,
                                           self.up.flow_values(expr), ref)
        if ref2 is not None and ref2.extra == 'runtime':
          ref, why = ref2, None
        elif why2:
          ref, why = None, f'{expr.value!r}: {why2}'
      if ref is None and (why or expr.value in getattr(self.up, 'fields',
                                                       ())):
        # what the codebase binds it to, followed through values (flow.py)
        ref2, why2 = self.from_flow(expr)
        if ref2 is not None:
          ref, why = ref2, None
        elif why2 and not why:
          why = why2
      if ref is None and not why:
        # a hyper-parameter whose default is a legacy attention class
        # (rules/attention.py: called through a run-time check)
        ref, why = attention_rule.field_attention(self, expr)
      if why:
        self.why_not[expr.value] = why
      if ref is not None or why:
        return ref
      info = ctx.codebase.module(ctx.facts, expr.value)
      if info is not None and not info.problems:
        return _shared.Ref('class', info, None)
      layer = subclasses.param_layer(ctx.codebase, info)
      if layer is not None:  # class StdConv(nn.Conv) overriding param
        return _shared.Ref('layer', layer, None)
      ref = aliases_rule.resolve_alias(self, expr.value)
      if ref is None and self.flow_ok and self.flow_names:
        ref, why = self.from_flow(expr)
        if why:
          self.why_not[expr.value] = why
      return ref
    if (isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name)
        and expr.value.value not in self.locals):
      # module.Class, ``module`` an imported file of the codebase
      f = ctx.codebase.imported_file(ctx.facts, expr.value.value)
      info = f.modules.get(expr.attr.value) if f is not None else None
      if info is not None and not info.problems:
        return _shared.Ref('class', info, None)
      layer = subclasses.param_layer(ctx.codebase, info)
      if layer is not None:
        return _shared.Ref('layer', layer, None)
    if isinstance(expr, (cst.Attribute, cst.Subscript)) and self.flow_ok:
      # self.network, KNOWN_MODELS[name]: what it holds (flow.py)
      ref, why = self.from_flow(expr)
      if why:
        self.why_not[self.up.ctx.code_of(expr)] = why
      return ref
    if isinstance(expr, cst.Call):
      f = expr.func
      if isinstance(f, cst.Attribute) and f.attr.value in ('partial',
                                                           'shared'):
        inner = self.used_as(f.value, f.attr.value)
        if inner is not None and (inner.kind in ('layer', 'class') or (
            inner.kind == 'partial' and f.attr.value == 'partial')):
          return _shared.Ref(f.attr.value, inner, expr)
      target, _ = ctx.codebase.partial_helper(ctx.facts, f)
      if target is not None:  # helper() / module.helper() -> X.partial
        inner = self(cst_util.expr(target))
        if inner is not None and inner.kind in ('layer', 'class'):
          return _shared.Ref('partial', inner, expr)
      return None
    if isinstance(expr, cst.IfExp):
      a, b = self(expr.body), self(expr.orelse)
      if (a is not None and b is not None and a.kind == b.kind == 'class'
          and a.target.fields == b.target.fields
          and a.target.call == b.target.call):
        return _shared.Ref('class', a.target, 'ambiguous')
    return None


def _orig_arg(call, position, keyword):
  """The value ``call`` passes for a parameter (its position, its
  keyword), or None."""
  for i, a in enumerate(call.args):
    if a.star:
      return None
    if (a.keyword is None and i == position) or cst_util.kw(a) == keyword:
      return a.value
  return None


def _module_call_form(call):
  """A call that passes ``name=`` or two or more positional arguments."""
  positional = [a for a in call.args if a.keyword is None and not a.star]
  return len(positional) >= 2 or any(
      a.keyword is not None and a.keyword.value == 'name' for a in call.args)


def _partial_root(ref):
  """The layer / class Ref at the bottom of a chain of partials."""
  while ref.kind == 'partial':
    ref = ref.target
  return ref


class _LocalScan(walk.FastVisitor):
  """Local variables bound to module references (one body)."""

  def __init__(self, resolver):
    self.resolver = resolver
    self.vars = {}
    self.assigned = set()

  def visit_Assign(self, node):
    for t in node.targets:
      for n in _target_names(t.target):
        self.assigned.add(n)
    if len(node.targets) == 1 and isinstance(node.targets[0].target,
                                             cst.Name):
      name = node.targets[0].target.value
      ref = self.resolver(node.value)
      if name in self.vars and self.vars[name] != ref:
        self.vars[name] = None
      else:
        self.vars[name] = ref

  def visit_AugAssign(self, node):
    self.assigned.update(_target_names(node.target))

  def visit_AnnAssign(self, node):
    self.assigned.update(_target_names(node.target))

  def visit_For(self, node):
    self.assigned.update(_target_names(node.target))

  def visit_CompFor(self, node):
    self.assigned.update(_target_names(node.target))

  def visit_AsName(self, node):
    self.assigned.update(_target_names(node.name))

  def visit_Param(self, node):
    self.assigned.add(node.name.value)


def _write_only_handle(fn, call):
  """``call`` is the value of ``h = call`` in ``fn`` and ``h`` is used
  only as ``h.value = ...`` (and bound nowhere else)."""
  if fn is None:
    return False
  found = {'name': None, 'binds': 0, 'writes': 0, 'uses': 0}

  class Binder(cst.CSTVisitor):

    def visit_Assign(self, node):
      if node.value is call and len(node.targets) == 1 and isinstance(
          node.targets[0].target, cst.Name):
        found['name'] = node.targets[0].target.value

  fn.visit(Binder())
  name = found['name']
  if name is None:
    return False

  class Uses(cst.CSTVisitor):

    def visit_Assign(self, node):
      for t in node.targets:
        if isinstance(t.target, cst.Name) and t.target.value == name:
          found['binds'] += 1
        elif (isinstance(t.target, cst.Attribute)
              and isinstance(t.target.value, cst.Name)
              and t.target.value.value == name
              and t.target.attr.value == 'value'):
          found['writes'] += 1

    def visit_Name(self, node):
      if node.value == name:
        found['uses'] += 1

  fn.visit(Uses())
  # every mention: the binding, and the object of each ``.value =``
  return found['binds'] == 1 and found['writes'] >= 1 and (
      found['uses'] == 1 + found['writes'])


def _target_names(t):
  if isinstance(t, cst.Name):
    return [t.value]
  if isinstance(t, (cst.Tuple, cst.List)):
    out = []
    for e in t.elements:
      out += _target_names(e.value)
    return out
  if isinstance(t, cst.StarredElement):
    return _target_names(t.value)
  return []


class ApplyRewriter(Upgrader):
  """Rewrites one ``apply`` body (or ``@nn.module`` function body)."""

  PLAIN_BODIES = False  # resolves its locals itself

  plan_class = name_plan.NamePlan  # rules/methods.py expands helper-method calls

  def __init__(self, up, info, fn):
    super().__init__(up.ctx)
    self.info = info
    self.fn = fn
    # flow.py scope of the body (the class's leave has left its scope)
    self._quals = list(getattr(up, '_quals', [])) + (
        [info.name, 'apply'] if info.kind == 'class' else [info.name])
    self.fields = set(info.fields) | ({info.var_kw} if info.var_kw else set())
    self.resolver = Resolver(self, {})
    self.resolver.flow_names = False
    for _ in range(4):  # to a fixpoint: ``B = A.partial(...)``, A local
      scan = _LocalScan(self.resolver)
      fn.body.visit(scan)
      found = {k: v for k, v in scan.vars.items() if v is not None}
      if found.keys() == self.resolver.locals.keys():
        break
      self.resolver.locals = found
    self.resolver.flow_names = True
    self.assigned_fields = sorted(self.fields & scan.assigned)
    self._skip_names = set()
    # locals holding X.partial(...) or a module from outside (wmt's embed)
    self.instance_locals = partial_locals.find(fn.body, self.resolver,
                                               self.resolver.locals)
    for name, (pref, _, _, _) in self.instance_locals.items():
      self.resolver.locals[name] = _shared.Ref('instance', pref.target, None)
    plan = self.plan_class(self.resolver, self.resolver.locals)
    fn.body.visit(plan)
    self.dynamic = plan.dynamic
    self.names = None
    self.instance_partials = {}  # id(X.partial call) -> legacy name or None
    for name, (pref, values, call, _) in self.instance_locals.items():
      legacy = None if plan.dynamic else partial_locals.legacy_name(
          plan.events, call, name_plan.type_name(pref))
      for v in values:
        self.instance_partials[id(v)] = (name, legacy)
    if not plan.dynamic:
      self.names = name_plan.plan_names(plan.events, plan.nested_ids)
      if self.names is None:
        self.dynamic = True
    # --names linen (rules/linen_names.py): linen's own auto-names where
    # they are known statically; the legacy plan above otherwise
    self.rename = None
    if up.ctx.codebase.names_mode == 'linen':
      self.rename = linen_names.plan(self, plan, fn)
    if self.dynamic and plan.nested:
      self.todo_all = ('auto-named submodules inside the arguments of other '
                       'auto-named submodules, under a loop or condition: '
                       'check the names')
    else:
      self.todo_all = None
    self.used_dynamic = False
    self._cache_calls = set()  # ids of cache.store / cache.retrieve funcs

  # -- names that are not loads --
  def visit_Attribute(self, node):
    super().visit_Attribute(node)
    self._skip_names.add(id(node.attr))
    if (isinstance(node.value, cst.Name) and node.value.value in self.fields
        and node.attr.value in ('retrieve', 'store', 'as_dict')
        and id(node) not in self._cache_calls):
      self.todo(node, f'{node.value.value!r} is a legacy nn.Collection '
                'argument: port it to a linen variable collection by hand')

  def visit_Arg(self, node):
    if node.keyword is not None:
      self._skip_names.add(id(node.keyword))

  def visit_Param(self, node):
    self._skip_names.add(id(node.name))

  def visit_ImportAlias(self, node):
    return False

  def leave_Name(self, original_node, updated_node):
    if id(original_node) in self._skip_names:
      return updated_node
    v = original_node.value
    if v in self.fields and v not in self.assigned_fields:
      return cst.Attribute(value=cst.Name('self'), attr=cst.Name(v))
    return updated_node

  # -- calls --
  def visit_Call(self, node):
    super().visit_Call(node)
    if attention_cache.module_call_shape(self, node):
      self._cache_calls.add(id(node.func))
    ref = self.resolver(node.func)
    if ref is not None:
      self._handled.add(id(node.func))
      root = _partial_root(ref) if ref.kind == 'partial' else ref
      if root.kind == 'class':  # a legacy layer for a wrapper to drive
        drivers.layer_values(self, node, root.target)
    f = node.func
    if isinstance(f, cst.Attribute) and f.attr.value in ('partial', 'shared'):
      if self.resolver(f.value) is not None:
        self._handled.add(id(f))
        self._handled.add(id(f.value))
    name = cst_util.legacy_attr(f, self.ctx.facts.nn_prefixes)
    if name in ('make_rng', 'is_stochastic'):
      self._handled.add(id(f))
    if (isinstance(f, cst.Attribute) and f.attr.value == 'is_initializing'
        and isinstance(f.value, cst.Name) and f.value.value == 'self'
        and getattr(self.info, 'name', None) in
        self.ctx.codebase.shared_classes):
      self.todo(node, f'{self.info.name} is used as a shared module: legacy '
                'is_initializing() is False in the second and later calls of '
                'a shared instance during init, linen\'s is True in all of '
                'them (spec legacy-nn trap 21): check this branch')
    return True

  def leave_Call(self, original_node, updated_node):
    if id(original_node) in self.instance_partials:
      inner = self.resolver(original_node.func.value)
      return self._instance(original_node, updated_node, inner)
    if id(original_node.func) in self._cache_calls:
      # cache.store / cache.retrieve of the legacy attention cache
      return attention_cache.module_call(self, original_node, updated_node)
    # P.init / P.call of a module class held by a parameter
    new = drivers.life_cycle_call(self, original_node, updated_node)
    if new is not None:
      return new
    updated_node = self._unfrozen_tree_args(original_node, updated_node)
    updated = super().leave_Call(original_node, updated_node)
    if updated is not updated_node:
      return updated
    f = original_node.func
    name = cst_util.legacy_attr(f, self.ctx.facts.nn_prefixes)
    if name == 'make_rng' and not original_node.args:
      self.rewrote(original_node, 'stochastic', "nn.make_rng() -> "
                   "self.make_rng('dropout')")
      return cst_util.expr("self.make_rng('dropout')")
    if name == 'is_stochastic' and not original_node.args:
      self.rewrote(original_node, 'stochastic', 'nn.is_stochastic()')
      return cst_util.expr("self.has_rng('dropout')")
    if isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name) and (
        f.value.value == 'self'):
      return self._self_method(original_node, updated_node, f.attr.value)
    if isinstance(f, cst.Attribute) and isinstance(
        f.value, cst.Name) and f.value.value in self.instance_locals:
      self.todo(original_node, partial_locals.ATTR_TODO.format(
          name=f.value.value, attr=f.attr.value))
    if isinstance(f, cst.Attribute) and f.attr.value in ('partial', 'shared'):
      inner = self.resolver.used_as(f.value, f.attr.value)
      if inner is not None and inner.kind == 'attention':
        self.todo(original_node, attention_rule.PARTIAL_TODO.format(
            name=self.ctx.code_of(f.value), attr=inner.target,
            what=f.attr.value))
        return updated_node
      if inner is not None and (inner.kind in ('layer', 'class') or (
          inner.kind == 'partial' and f.attr.value == 'partial')):
        if f.attr.value == 'partial':
          return partial_call(self, original_node, updated_node, inner)
        return self._shared(original_node, updated_node, inner)
    ref = self.resolver(f)
    if ref is None:
      if isinstance(f, cst.Name) and f.value in self.resolver.why_not:
        self.todo(original_node, self.resolver.why_not[f.value])
      elif (isinstance(f, cst.Name) and f.value in self.fields
            and self.info.defaults.get(f.value) in (None, 'None')
            and _module_call_form(original_node)):
        # a hyper-parameter called with hyper-parameters after the input
        # or a name=: a legacy module (X.partial) by the look of it, but
        # nothing in the codebase says what it holds (sam's conv=)
        self.todo(original_node, f'{f.value!r} is called like a legacy '
                  'module (arguments after the input, or a name=), but what '
                  'it holds is not known here: if it is a legacy module, '
                  'construct it with the hyper-parameters and call it on the '
                  'input')
      return updated_node
    if ref.kind == 'dropout':
      return self._dropout(original_node, updated_node)
    if ref.kind == 'attention':
      return attention_rule.rewrite(self, original_node, updated_node,
                                    ref.target, guard=ref.extra)
    if ref.kind == 'instance':
      return updated_node  # calls a module instance (rules/partial_locals)
    return self._module_call(original_node, updated_node, ref)

  def _unfrozen_tree_args(self, original, updated):
    """``jax.tree_map(f, params, mask)`` with ``mask`` a dict field: linen
    freezes dict fields (a FrozenDict), legacy kept the dict, and a dict
    and a FrozenDict are different pytree nodes: read it unfrozen."""
    name = cst_util.dotted(original.func)
    if not (name and name.startswith('jax.') and name.split('.')[-1] in (
        'tree_map', 'tree_multimap')) or len(original.args) != len(
            updated.args):
      return updated
    args = list(updated.args)
    changed = False
    for i, a in enumerate(original.args):
      if (i and not a.star and isinstance(a.value, cst.Name)
          and a.value.value in self.fields
          and a.value.value not in self.assigned_fields):
        args[i] = args[i].with_changes(value=cst.Call(
            func=cst_util.expr('flax.core.unfreeze'), args=[cst.Arg(args[i].value)]))
        changed = True
    if not changed:
      return updated
    self.ctx.needed_imports.add('flax')
    self.rewrote(original, 'frozen_fields', 'dict field in a pytree map -> '
                 'flax.core.unfreeze(field)')
    return updated.with_changes(args=args)

  def _self_method(self, original, updated, method):
    args = list(updated.args)
    if method == 'param':
      pos = [a for a in args if a.keyword is None]
      kw = {cst_util.kw(a): a for a in args if a.keyword is not None}
      if any(a.star for a in args):
        self.todo(original, 'self.param with *args')
        return updated
      ordered = pos + [kw.pop(k) for k in ('shape', 'initializer')
                       if k in kw]
      if len(ordered) != 3 or kw:
        self.todo(original, 'self.param(name, shape, init) expected')
        return updated
        # linen: param(name, init_fn, *init_args)
      new = [ordered[0].with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT),
             ordered[2].with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT),
             ordered[1].with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT)]
      self.rewrote(original, 'param', 'self.param(name, shape, init) -> '
                   'self.param(name, init, shape)')
      return updated.with_changes(args=cst_util.clean_args(new))
    if method == 'state':
      return self._state(original, updated)
    if method == 'is_stateful':
      # legacy: inside any nn.stateful, mutable=False (evaluation) too;
      # linen: the state collection is mutable, or it was given
      return cst_util.expr("(self.is_mutable_collection('batch_stats') or "
                   "'batch_stats' in self.variables)")
    if method in ('get_param', 'collection'):
      self.todo(original, f'self.{method} has no certain linen rewrite')
    return updated

  def holds_none(self, expr):
    """Whether ``expr`` (an original node, or None) is None in every run:
    the literal, or a parameter / field every call of the codebase leaves
    at (or sets to) None (flow.py)."""
    if expr is None:
      return False
    if isinstance(expr, cst.Name) and expr.value == 'None':
      return True
    if isinstance(expr, cst.Attribute) and isinstance(
        expr.value, cst.Name) and expr.value.value == 'self':
      expr = expr.attr  # a field read as self.f in the legacy source
    values = self.flow_values(expr)
    return values is not None and values == frozenset({flow_lib.NONE})

  def _state(self, original, updated):
    args = list(updated.args)
    names = ('name', 'shape', 'initializer', 'collection')
    bound = {}
    for i, a in enumerate(args):
      if a.star:
        self.todo(original, 'self.state with *args')
        return updated
      key = cst_util.kw(a) or (names[i] if i < len(names) else None)
      bound[key] = a.value
    if 'collection' in bound and self.holds_none(_orig_arg(
        original, list(names).index('collection'), 'collection')):
      # collection=None (the legacy default): the stateful context's
      del bound['collection']
    if ('collection' not in bound and 'shape' not in bound
        and 'initializer' not in bound and 'name' in bound
        and _write_only_handle(self.fn, original)):
      # ``tagged = self.state('tag'); tagged.value = x``: the handle is
      # only written (legacy's getter would raise before a write); a linen
      # variable of the stateful collection, created on the first write
      self.rewrote(original, 'state', "self.state(name) written only -> "
                   "self.variable('batch_stats', name)")
      return cst_util.expr(f"self.variable('batch_stats', "
                   f"{self.ctx.code_of(bound['name'])}, lambda: None)")
    if 'collection' in bound or 'shape' not in bound or 'name' not in bound:
      self.todo(original, 'self.state with an explicit collection or no '
                'shape: port by hand to self.variable')
      return updated
    code = self.ctx.code_of
    init = bound.get('initializer')
    init_src = 'nn.initializers.zeros' if init is None else code(init)
    shape = code(bound['shape'])
    if init is None or init_src.split('.')[-1] in ('zeros', 'ones'):
      new = (f"self.variable('batch_stats', {code(bound['name'])}, "
             f'{init_src}, None, {shape})')
      if init is None:
        new = new.replace('nn.initializers.zeros',
                          self._prefix() + '.initializers.zeros')
    else:
      new = (f"self.variable('batch_stats', {code(bound['name'])}, "
             f"lambda: {init_src}(self.make_rng('params'), {shape}))")
    self.rewrote(original, 'state', "self.state -> self.variable("
                 "'batch_stats', ...)")
    return cst_util.expr(new)

  def _prefix(self):
    prefixes = sorted(self.ctx.facts.nn_prefixes)
    p = prefixes[0] if prefixes else 'nn'
    return p.replace('flax.deprecated.nn', 'flax.linen').replace(
        'flax.nn', 'flax.linen')

  def _dropout(self, original, updated):
    args = list(updated.args)
    names = ('inputs', 'rate', 'deterministic', 'rng')
    bound = {}
    for i, a in enumerate(args):
      key = cst_util.kw(a) or (names[i] if i < len(names) else None)
      if a.star or key not in names:
        self.todo(original, 'nn.dropout call form')
        return updated
      bound[key] = a.value
    ctor = [cst_util.arg(bound['rate'], 'rate')]
    # legacy's default is deterministic=False; linen's Dropout has none
    ctor.append(cst_util.arg(bound.get('deterministic', cst_util.expr('False')),
                     'deterministic'))
    call = [cst_util.arg(bound['inputs'])]
    if 'rng' in bound:
      call.append(cst_util.arg(bound['rng'], 'rng'))
    self.rewrote(original, 'stochastic', 'nn.dropout -> nn.Dropout')
    return cst.Call(func=cst.Call(func=cst_util.expr(self._prefix() + '.Dropout'),
                                  args=cst_util.clean_args(ctor)),
                    args=cst_util.clean_args(call))

  def _auto_name(self, original, ref_type_name, ctor_src):
    """The ``name=`` argument to add for an auto-named call, or None."""
    if self.dynamic:
      self.used_dynamic = True
      if ref_type_name is None:
        if ctor_src is None:
          return None
        return cst_util.expr(f"f'{{{ctor_src}.__name__}}_{{next({_shared.AUTONAME_VAR})}}'")
      return cst_util.expr(f"f'{ref_type_name}_{{next({_shared.AUTONAME_VAR})}}'")
    name = self.names.get(id(original))
    if name is None:
      return None
    return cst.SimpleString(repr(name))

  def _instance(self, original, updated, inner):
    """``X.partial(**kw)`` held by a local called once -> ``X(**kw, name=)``."""
    local, legacy = self.instance_partials[id(original)]
    args = list(updated.args)
    if legacy is None or any(a.star or a.keyword is None for a in args):
      self.todo(original, f'{local} holds X.partial(...) or a module from '
                'outside: cannot tell the legacy name of its call')
      return updated
    if inner.kind == 'class':
      if any(cst_util.kw(a) not in inner.target.fields + ['name'] for a in args):
        self.todo(original, '.partial binds call parameters')
        return updated
      kwargs = args
    else:
      kwargs = _add_layer_defaults(
          inner.target, [_layer_kwarg(a, inner.target) for a in args])
    if _shared.call_name(original) is None:
      kwargs = list(kwargs) + [cst_util.arg(cst.SimpleString(repr(legacy)), 'name')]
    self.rewrote(original, 'partial', f'.partial held by {local} (called '
                 'once) -> one module instance')
    return cst.Call(func=_ctor_expr(self, inner, updated.func.value),
                    args=cst_util.clean_args(kwargs))

  def _shared(self, original, updated, inner):
    """``X.shared(**kw)`` -> ``X(**kw)``: one instance, called repeatedly."""
    args = list(updated.args)
    if any(a.star for a in args):
      self.todo(original, f'.shared(**...) of {inner.kind}')
      return updated
    ctor = _ctor_expr(self, inner, updated.func.value)
    if inner.kind == 'class':
      bad = [a for a in args if cst_util.kw(a) not in inner.target.fields + ['name']]
      if bad:
        self.todo(original, '.shared binds call parameters')
        return updated
      kwargs = args
    else:
      kwargs = [_layer_kwarg(a, inner.target) for a in args]
      kwargs = _add_layer_defaults(inner.target, kwargs)
    if _shared.call_name(original) is None:
      name = self._auto_name(original, None, None)
      if self.dynamic:
        name = cst_util.expr(f'str(next({_shared.AUTONAME_VAR}))')
      if name is not None:
        kwargs = list(kwargs) + [cst_util.arg(name, 'name')]
    self.rewrote(original, 'shared', '.shared(...) -> one module instance')
    return cst.Call(func=ctor, args=cst_util.clean_args(kwargs))

  def _module_call(self, original, updated, ref):
    if ref.kind == 'class' and ref.extra == 'runtime':
      return runtime_modules.call(
          self, original, updated, ref, lambda: self._auto_name(
              original, None, cst.Module([]).code_for_node(updated.func)))
    args = list(updated.args)
    if any(a.star for a in args if a.star == '*'):
      self.todo(original, 'submodule call with *args')
      return updated
    if ref.kind == 'shared':
      # a call of a shared module variable: inputs only
      target = ref.target
      if target.kind == 'layer':
        extra = [a for a in args[1:]]
      else:
        extra = [a for a in args if cst_util.kw(a) in target.target.fields]
      if extra:
        self.todo(original, 'call of a shared module with hyper-parameters')
      return updated
    target = _partial_root(ref)
    var_pos = None
    if target.kind == 'layer':
      sig = ('inputs',) + target.target.params
      pos_sig = sig
    else:
      sig = tuple(target.target.params)
      pos_sig = sig
      var_pos = target.target.var_pos
      if var_pos:  # positional arguments past the named ones: *args
        pos_sig = tuple(p for p in sig if p not in target.target.kwonly)
    bound = []  # (legacy param name or None, Arg)
    var_kw = {}
    splat_values = {}  # id(updated ** Arg) -> the legacy source's value
    expanded = []
    for a, o in zip(args, original.args):
      keys = splat.literal_keywords(a.value) if a.star == '**' else None
      if keys is not None:  # **{'k': v}: keywords of the call
        expanded += [(cst_util.arg(v, k2), None) for k2, v in keys]
      else:
        expanded.append((a, o))
    args = [a for a, _ in expanded]
    for i, (a, o) in enumerate(expanded):
      k = cst_util.kw(a)
      if a.star == '**' and o is not None:
        splat_values[id(a)] = o.value
      if a.star == '**':
        if target.kind == 'class' or not target.target.add_kwargs:
          bound.append(('**', a))  # layer: keys renamed at run time below
          continue
        self.todo(original, f'legacy {target.target.legacy} call with '
                  '**kwargs (the argument linen needs for legacy numbers '
                  'may be among them)')
        return updated
      if k is None:
        if i >= len(pos_sig) and var_pos:
          bound.append(('*', a))
          continue
        if i >= len(pos_sig):
          self.todo(original, 'more positional arguments than the legacy '
                    'apply takes')
          return updated
        bound.append((pos_sig[i], a))
      elif k == 'name':
        bound.append(('name', a))
      elif k in sig:
        bound.append((k, a))
      elif target.kind == 'class' and target.target.var_kw:
        var_kw[k] = a
      else:
        self.todo(original, f'unknown argument {k!r} of a legacy module')
        return updated
    if target.kind == 'layer':
      layer = target.target
      origin = {id(a): o for a, o in expanded}
      for k, a in list(bound):
        if (layer.legacy, k) in layer_table.UNSUPPORTED_ARGS:
          o = origin.get(id(a))
          if o is not None and not o.star and self.holds_none(o.value):
            # None, the legacy default: the default collection, linen's
            bound.remove((k, a))
            self.rewrote(original, 'collections', f'{k}=None dropped '
                         '(the default collection)')
            continue
          self.todo(original, layer_table.UNSUPPORTED_ARGS[(layer.legacy, k)])
          return updated
      inputs = [a for k, a in bound if k == 'inputs']
      ctor, positional_ok = [], ref.kind == 'layer'
      for k, a in bound:
        if k == 'inputs':
          continue
        if k == 'name':
          ctor.append(a)
          continue
        if k == '**':
          positional_ok = False
          ctor.append(a.with_changes(value=_renamed_kwargs(layer, a.value)))
          continue
        idx = layer.params.index(k)
        lk = layer_table.linen_kwarg(layer, k)
        if (positional_ok and a.keyword is None and idx < len(
            layer.linen_fields) and layer.linen_fields[idx] == lk):
          ctor.append(a)
        else:
          positional_ok = False
          ctor.append(cst_util.arg(a.value, lk).with_changes(comma=a.comma))
      if ref.kind == 'layer':
        ctor = _add_layer_defaults(layer, ctor)
      call_args = [a.with_changes(keyword=None,
                                  equal=cst.MaybeSentinel.DEFAULT)
                   for a in inputs]
      type_name = layer.legacy
      if layer.note:
        self.ctx.report.rewritten.append(
            {'rule': 'layers', 'line': self.ctx.line(original),
             'what': f'{layer.legacy}: {layer.note}'})
    else:
      info = target.target
      ctor, call_args = [], []
      splats = [a for k, a in bound if k == '**']
      given = {kk for kk, _ in bound}
      if len(splats) > 1:
        self.todo(original, 'several dicts splatted into one legacy module '
                  'call: split them by hand')
        return updated
      for k, a in bound:
        if k == 'name' or k in info.fields:
          ctor.append(a if a.keyword is not None else cst_util.arg(a.value, k))
        elif k == '**':
          new = self._splat(original, info, a, splat_values.get(id(a)),
                            given, var_kw)
          if new is None:
            return updated
          ctor.append(new[0])
          if new[1] is not None:
            call_args.append(cst.Arg(value=new[1], star='**'))
          if info.var_kw:
            var_kw = {}  # merged into the split
        else:
          call_args.append(a)
      if var_kw:
        items = ', '.join(f'{k!r}: {self.ctx.code_of(a.value)}'
                          for k, a in var_kw.items())
        ctor.append(cst_util.arg(cst_util.expr('{' + items + '}'), info.var_kw))
      type_name = name_plan.type_name(target)
    if _shared.call_name(original) is None and not name_plan.partial_named(ref):
      if self.todo_all:
        self.todo(original, self.todo_all)
      ctor_src = None
      if type_name is None and isinstance(original.func, cst.Name):
        ctor_src = cst.Module([]).code_for_node(updated.func)
      name = self._auto_name(original, type_name, ctor_src)
      if name is None and type_name is None:
        self.todo(original, 'cannot tell the legacy auto-name')
      if name is not None:
        ctor = list(ctor) + [cst_util.arg(name, 'name')]
    func = _ctor_expr(self, ref, updated.func)
    self.rewrote(original, 'module_call', f'{type_name or "module"} call -> '
                 'construct + call')
    return cst.Call(func=cst.Call(func=func, args=cst_util.clean_args(ctor)),
                    args=cst_util.clean_args(call_args))


def _splat(self, original, info, arg, legacy_value, given, var_kw):
  """``**d`` in a call of the legacy module ``info`` (rules/splat.py):
  (constructor Arg, call expression or None), or None after a TODO."""
  if not info.var_kw and set(info.call) <= given:
    # every call parameter passed explicitly: the keys are fields (or a
    # TypeError, as in legacy)
    return arg, None
  caller = self.info
  if (info.var_kw and legacy_value is not None
      and getattr(caller, 'var_kw', None) not in self.assigned_fields
      and splat.forwarded_whole(caller, info, legacy_value, given)):
    value = arg.value
    if var_kw:
      items = ', '.join(f'{k!r}: {self.ctx.code_of(a.value)}'
                        for k, a in var_kw.items())
      value = cst_util.expr(f'{{**{self.ctx.code_of(value)}, {items}}}')
    self.rewrote(original, 'splat', f'**{info.var_kw} forwarded whole')
    return cst_util.arg(value, info.var_kw), None
  split, why = splat.runtime_split(
      self, info, arg.value, [(k, a.value) for k, a in var_kw.items()],
      self.ctx.code_of)
  if split is None:
    self.todo(original, why)
    return None
  self.rewrote(original, 'splat', f'**dict into {info.name}: split into '
               'fields / catch-all at run time')
  return cst.Arg(value=split[0], star='**'), split[1]



ApplyRewriter._splat = _splat  # pylint: disable=protected-access

def _ctor_expr(up, ref, updated_func):
  """The constructor expression: ``nn.Dense``, ``Block``, a variable ..."""
  if ref.kind == 'layer':
    if ref.target.linen in layer_table.SHIPPED:
      # a flaxlegacy linen layer (layer_table.py SHIPPED)
      full = layer_table.SHIPPED[ref.target.linen]
      up.ctx.needed_imports.add(full.rsplit('.', 1)[0])
      up.ctx.report.rewritten.append({
          'rule': 'layer', 'line': up.ctx.line(updated_func),
          'what': f'nn.{ref.target.legacy} -> {ref.target.linen}',
          'shipped': full})
      return cst_util.expr(ref.target.linen)
    if subclasses.is_user_layer(ref.target):
      return updated_func  # the user's subclass of a layer (StdConv)
    return updated_func if isinstance(updated_func, cst.Attribute) else cst_util.expr(
        up._prefix() + '.' + ref.target.linen)  # pylint: disable=protected-access
  return updated_func


def _renamed_kwargs(layer, value):
  """``**kwargs`` forwarded to a legacy layer, with legacy keys (``bias``)
  renamed to linen's (``use_bias``) when the call runs."""
  renames = {k: v for k, v in layer.renames.items() if k in layer.params}
  if not renames:
    return value
  table = '{' + ', '.join(f'{k!r}: {v!r}' for k, v in renames.items()) + '}'
  src = cst.Module([]).code_for_node(value)
  if not isinstance(value, (cst.Name, cst.Attribute)):
    src = f'({src})'
  return cst_util.expr(f'{{{table}.get(k, k): v for k, v in {src}.items()}}')


def _layer_kwarg(a, layer):
  k = cst_util.kw(a)
  if k is None or k == 'name':
    return a
  return a.with_changes(keyword=cst.Name(layer_table.linen_kwarg(layer, k)))


def _add_layer_defaults(layer, args):
  have = {cst_util.kw(a) for a in args}
  out = list(args)
  for k, v in layer.add_kwargs.items():
    if k not in have:
      out.append(cst_util.arg(cst_util.expr(v), k))
  return out


def partial_call(up, original, updated, inner):
  """``X.partial(**kw)`` -> ``functools.partial(X, **kw)``."""
  args = list(updated.args)
  if any(a.keyword is None and not a.star for a in args):
    up.todo(original, '.partial with positional arguments')
    return updated
  if inner.kind == 'layer':
    layer = inner.target
    for a in args:
      if (layer.legacy, cst_util.kw(a)) in layer_table.UNSUPPORTED_ARGS:
        up.todo(original, layer_table.UNSUPPORTED_ARGS[(layer.legacy,
                                                        cst_util.kw(a))])
        return updated
    args = _add_layer_defaults(layer, [_layer_kwarg(a, layer) for a in args])
    args = [a.with_changes(value=_renamed_kwargs(layer, a.value))
            if a.star == '**' else a for a in args]
  else:
    root = _partial_root(inner)
    fields = root.target.fields if root.kind == 'class' else []
    if root.kind == 'layer':
      fields = [layer_table.linen_kwarg(root.target, p)
                for p in root.target.params]
      args = [_layer_kwarg(a, root.target) for a in args]
      args = [a.with_changes(value=_renamed_kwargs(root.target, a.value))
              if a.star == '**' else a for a in args]
    elif root.kind == 'class' and (root.target.var_kw or any(
        a.star == '**' for a in args)):
      args = _partial_class_kwargs(up, original, root.target, args)
      if args is None:
        return updated
    bad = [cst_util.kw(a) for a in args if cst_util.kw(a) and cst_util.kw(a) not in fields + ['name']
           + [root.target.var_kw] * (root.kind == 'class')]
    if bad:
      up.todo(original, f'.partial binds call parameters {bad}')
      return updated
  up.ctx.needed_imports.add('functools')
  up.rewrote(original, 'partial', '.partial -> functools.partial')
  ctor = _ctor_expr(up, inner, updated.func.value)
  return cst.Call(func=cst_util.expr('functools.partial'),
                  args=cst_util.clean_args([cst_util.arg(ctor)] + args))


def _partial_class_kwargs(up, original, info, args):
  """The keywords of ``X.partial(...)`` for a class with a ``**`` catch-all
  or given a splatted dict: keys that are not parameters go into the
  catch-all field; a dict is split at run time (rules/splat.py).  None
  after a TODO."""
  splats = [a for a in args if a.star == '**']
  extra = [(a.keyword.value, a.value) for a in args if a.keyword is not None
           and a.keyword.value not in info.params + ['name']]
  if not splats and not (extra and info.var_kw):
    return args
  out = [a for a in args if not a.star and (
      a.keyword is None or a.keyword.value in info.params + ['name'])]
  if len(splats) > 1:
    up.todo(original, 'several dicts splatted into one .partial: split them '
            'by hand')
    return None
  if not splats:
    items = ', '.join(f'{k!r}: {up.ctx.code_of(v)}' for k, v in extra)
    return out + [cst_util.arg(cst_util.expr('{' + items + '}'), info.var_kw)]
  if not info.var_kw and len(info.call) <= 1:
    return args  # its keys can only be fields (or a TypeError, as legacy)
  if not info.var_kw:
    up.todo(original, 'a dict splatted into .partial of a module with call '
            'parameters: its keys are not known here')
    return None
  if len(info.call) > 1:
    up.todo(original, 'a dict splatted into .partial of a module with call '
            'parameters and a ** catch-all: its keys are not known here')
    return None
  split, why = splat.runtime_split(up, info, splats[0].value, extra,
                                   up.ctx.code_of)
  if split is None:
    up.todo(original, why)
    return None
  up.rewrote(original, 'splat', f'**dict into {info.name}.partial: split '
             'into fields / catch-all at run time')
  return out + [cst.Arg(value=split[0], star='**')]


def module_level_partial_visit(up, node):
  """Marks ``X.partial`` callees a rule will consume (for the leftovers);
  legacy layers passed to a wrapper that drives them (rules/drivers.py)."""
  f = node.func
  target, helper_facts = up.ctx.codebase.partial_helper(up.ctx.facts, f)
  if target is not None:
    info = alias_facts.root_info(up.ctx.codebase, helper_facts,
                                  target.split('.')[-1])
    name = f.value if isinstance(f, cst.Name) else f.attr.value
    if info is not None:
      drivers.layer_values(up, node, info,
                           helper_facts.partial_helper_binds.get(name, {}))
  elif isinstance(f, cst.Attribute) and f.attr.value == 'partial':
    info = alias_facts.root_info(up.ctx.codebase, up.ctx.facts,
                                  cst_util.dotted(f.value) and cst_util.dotted(
                                      f.value).split('.')[-1])
    if info is not None:
      drivers.layer_values(up, node, info)
  if isinstance(f, cst.Attribute) and f.attr.value == 'partial':
    if Resolver(up, {})(f.value) is not None:
      up._handled.add(id(f.value))  # pylint: disable=protected-access
      up._handled.add(id(f))  # pylint: disable=protected-access


def module_level_partial_leave(up, original_node, updated_node):
  """``X.partial(...)`` outside module bodies -> ``functools.partial``."""
  f = original_node.func
  if isinstance(f, cst.Attribute) and f.attr.value == 'partial':
    resolver = Resolver(up, {})
    inner = resolver.used_as(f.value, 'partial')
    if inner is not None and inner.kind in ('layer', 'class', 'partial'):
      return partial_call(up, original_node, updated_node, inner)
    if inner is None:
      new = _classes_partial(up, original_node, updated_node)
      if new is not updated_node:
        return new
    why = resolver.why_not.get(up.ctx.code_of(f.value))
    if why:  # what the facts say it holds (the TODO says it)
      up.partial_why = getattr(up, 'partial_why', {})
      up.partial_why[id(original_node)] = why
  return updated_node


PARTIAL_HELPER = 'flaxlegacy.migrate.upgraded.partial_module'


def _classes_partial(up, original, updated):
  """``X.partial(k=v)`` where X holds legacy module classes of different
  parameters (an agent's ``network`` argument, its subclasses passing
  their own ``.partial`` of another class): ``functools.partial(X, k=v)``
  when every keyword is a field of every class X can hold (the values
  flow.py names; an unknown one is a class the codebase is configured
  with)."""
  vals = up.flow_values(original.func.value) if hasattr(
      up, 'flow_values') else None
  if vals:
    # only what a working program can hold where ``.partial`` is used
    # (flow.usable: a plain class without it is dropped)
    vals = flow_lib.usable(vals, 'partial',
                           getattr(up.ctx.codebase, 'flow', None))
  if not vals:
    return updated
  kinds = {v[0] for v in vals}
  if 'class' not in kinds or not kinds <= {'class', 'unknown'}:
    return updated
  args = list(updated.args)
  if any(a.keyword is None and a.star != '**' for a in args):
    return updated  # positional or * arguments: the TODO stays
  runtime = False
  for v in vals:
    if v[0] != 'class':
      continue
    f = up.ctx.codebase.files.get(v[1])
    info = f.modules.get(v[2]) if f is not None else None
    if info is None or info.problems or info.var_kw:
      return updated
    if any(a.keyword is None or a.keyword.value not in info.fields + ['name']
           for a in args):
      runtime = True
  if runtime:
    # ``**kwargs``, or keywords some class takes at its call: split by the
    # class at run time (legacy_model.partial_module), when every value is
    # a class the upgrade converts (an unknown one may take anything)
    if 'unknown' in kinds:
      return updated
    up.ctx.needed_imports.add(PARTIAL_HELPER)
    up.rewrote(original, 'partial', '.partial of module classes of '
               'different parameters -> partial_module (keywords split '
               'at run time)')
    return cst.Call(func=cst_util.expr(PARTIAL_HELPER.rsplit('.', 1)[1]),
                    args=cst_util.clean_args([cst_util.arg(updated.func.value)] + args))
  up.ctx.needed_imports.add('functools')
  up.rewrote(original, 'partial', '.partial of module classes known by '
             'their values -> functools.partial')
  return cst.Call(func=cst_util.expr('functools.partial'),
                  args=cst_util.clean_args([cst_util.arg(updated.func.value)] + args))
