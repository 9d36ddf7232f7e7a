"""Legacy module classes with helper methods besides ``apply``.

Legacy Flax ran ``apply`` on a fresh module instance per call, so ``apply``
could call plain methods of its own class (``self._build_messages(...)``),
those methods could create submodules (``nn.Dense(x, ...)``), and ``apply``
could stash per-call values on ``self`` (``self.num_nodes =
x.shape[0]``) for the methods to read.  In linen:

* a plain method called from the ``@nn.compact`` ``__call__`` may create
  submodules as well (linen stays in the compact context while it runs), so
  each such helper keeps its place and gets the same body rewrite as
  ``apply`` (legacy layer calls -> construct + call, ``self.param`` ...);
  the legacy auto-names are planned over ``apply`` with every helper call
  expanded where it runs (the legacy counter is one per module instance);
* a linen module is a frozen dataclass, so ``self.X = value`` in ``apply``:
  - ``self.features = features`` where ``features`` became a field: dropped
    (the field already holds that value);
  - otherwise: a local ``X = value`` in ``__call__``, and every helper that
    reads ``self.X`` (directly or through another helper) gets a
    keyword-only parameter ``X``, passed as ``X=X`` at each call.

Left with a TODO (the class keeps the current whole-class note): methods
that are decorated (``@nn.module_method`` has its own rule,
rules/module_methods.py; other decorators stay), helpers that make ``X.shared`` /
``X.partial`` modules for their caller, methods not reached from ``apply``,
helpers used other than by a direct ``self.m(...)`` call, ``self.X``
assigned in a helper, or a name clash of ``X`` with a local or parameter.

The facts side (``collect_class`` / ``refine_split``) feeds the field/call
split of facts.py: a parameter passed positionally to a user module (after
its input) is a call parameter of that module if that module has helper
methods (its helpers take such arguments the way ``apply`` does; for other
classes positional hyper-parameters stay fields), and a parameter of ``apply``
handed to a helper method that uses it as an array is a call parameter.
"""

import dataclasses
from typing import Dict, List, Optional

import libcst as cst

from flaxlegacy.upgrade import walk
from flaxlegacy.upgrade.rules import _shared
from flaxlegacy.upgrade.rules import name_plan


# -- facts ------------------------------------------------------------------


# -- conversion -------------------------------------------------------------


def _self_attr(node):
  """'X' for ``self.X``, else None."""
  if (isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name)
      and node.value.value == 'self'):
    return node.attr.value
  return None


class _Scan(walk.FastVisitor):
  """``self.X = ...`` statements, ``self.X`` reads, helper references."""

  def __init__(self, helpers):
    self.helpers = helpers
    self.assigns = []  # (Assign node, X)
    self.bad_assign = []  # X assigned other than by a plain ``self.X = v``
    self.reads = set()
    self.calls = set()  # helpers called directly
    self.call_funcs = set()  # ids of Attribute nodes that are call funcs
    self.escaped = set()  # helpers referenced other than by a call
    self.names = set()  # every Name (locals, params, globals)

  def visit_Assign(self, node):
    if len(node.targets) == 1 and _self_attr(node.targets[0].target):
      self.assigns.append((node, _self_attr(node.targets[0].target)))
      node.value.visit(self)
      return False
    for t in node.targets:
      self._bad(t.target)
    return True

  def _bad(self, target):
    for n in _targets(target):
      a = _self_attr(n)
      if a is not None:
        self.bad_assign.append(a)

  def visit_AugAssign(self, node):
    self._bad(node.target)

  def visit_AnnAssign(self, node):
    self._bad(node.target)

  def visit_Call(self, node):
    a = _self_attr(node.func)
    if a in self.helpers:
      self.calls.add(a)
      self.call_funcs.add(id(node.func))

  def visit_Attribute(self, node):
    a = _self_attr(node)
    if a is None:
      return True
    if a in self.helpers:
      if id(node) not in self.call_funcs:
        self.escaped.add(a)
    else:
      self.reads.add(a)
    return False

  def visit_Name(self, node):
    self.names.add(node.value)

  def visit_Param(self, node):
    self.names.add(node.name.value)


def _targets(t):
  if isinstance(t, (cst.Tuple, cst.List)):
    out = []
    for e in t.elements:
      out += _targets(e.value)
    return out
  if isinstance(t, cst.StarredElement):
    return _targets(t.value)
  return [t]


class _Thread(cst.CSTTransformer):
  """One method body: ``self.X`` -> ``X``; ``self.h(...)`` gets ``X=X``."""

  def __init__(self, local_attrs, needs, drop, to_local):
    super().__init__()
    self.local_attrs = local_attrs  # X read as a local in this method
    self.needs = needs  # helper -> sorted [X] it takes
    self.drop = drop  # ids of Assign statements to drop
    self.to_local = to_local  # ids of Assign statements -> ``X = v``

  def leave_SimpleStatementLine(self, original_node, updated_node):
    body = [s for s, o in zip(updated_node.body, original_node.body)
            if id(o) not in self.drop]
    if not body:
      return cst.RemoveFromParent()
    return updated_node.with_changes(body=body)

  def leave_Assign(self, original_node, updated_node):
    if id(original_node) in self.to_local:
      x = _self_attr(original_node.targets[0].target)
      return updated_node.with_changes(targets=[
          updated_node.targets[0].with_changes(target=cst.Name(x))])
    return updated_node

  def leave_Attribute(self, original_node, updated_node):
    a = _self_attr(original_node)
    if a in self.local_attrs:
      return cst.Name(a)
    return updated_node

  def leave_Call(self, original_node, updated_node):
    a = _self_attr(original_node.func)
    if a in self.needs and self.needs[a]:
      args = list(updated_node.args)
      if args:
        args[-1] = args[-1].with_changes(comma=cst.Comma(
            whitespace_after=cst.SimpleWhitespace(' ')))
      for i, x in enumerate(self.needs[a]):
        args.append(cst.Arg(
            value=cst.Name(x), keyword=cst.Name(x),
            equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(''),
                                  whitespace_after=cst.SimpleWhitespace('')),
            comma=(cst.Comma(whitespace_after=cst.SimpleWhitespace(' '))
                   if i < len(self.needs[a]) - 1 else
                   cst.MaybeSentinel.DEFAULT)))
      return updated_node.with_changes(args=args)
    return updated_node


def _add_kwonly(fn, names):
  ps = fn.params
  star = ps.star_arg
  if isinstance(star, cst.MaybeSentinel):
    star = cst.ParamStar()
  kwonly = list(ps.kwonly_params) + [cst.Param(name=cst.Name(x))
                                     for x in names]
  kwonly = [p.with_changes(comma=cst.MaybeSentinel.DEFAULT) for p in kwonly]
  return fn.with_changes(params=ps.with_changes(star_arg=star,
                                                kwonly_params=kwonly))


@dataclasses.dataclass
class Plan:
  """What ``convert_class`` needs: the threaded ``apply`` and helpers."""
  apply: cst.FunctionDef
  helpers: Dict[str, cst.FunctionDef]  # name -> threaded FunctionDef
  originals: Dict[int, str]  # id of the original FunctionDef -> name
  left: List[str]  # methods left as they were (TODO)
  why: Optional[str] = None  # why nothing was converted
  notes: List[str] = dataclasses.field(default_factory=list)

  def rewriter(self, up, info, fn):
    from flaxlegacy.upgrade.rules import apply_rewriter  # pylint: disable=g-import-not-at-top

    helpers = self.helpers

    class _ApplyWithHelpers(apply_rewriter.ApplyRewriter):

      def plan_class(self, resolver, local_vars):
        return _inlining_plan(resolver, local_vars, helpers)

    return _ApplyWithHelpers(up, info, fn)

  def finish(self, up, node, info, apply_rw):
    """{id of an original helper FunctionDef: its rewrite}; reports."""
    if self.why:
      up.todo(node, f'{info.name}: {self.why}')
    out = {}
    for key, name in self.originals.items():
      new = self.convert_helper(up, info, name, apply_rw)
      if new is None:
        self.left.append(name)
        continue
      out[key] = new
      up.rewrote(new, 'methods', f'{info.name}.{name}: helper method '
                 'rewritten like apply')
    for note in self.notes:
      up.rewrote(node, 'methods', f'{info.name}.{note}')
    return out

  def convert_helper(self, up, info, name, apply_rw):
    """The rewritten helper FunctionDef, or None (left with a TODO)."""
    from flaxlegacy.upgrade.rules import apply_rewriter  # pylint: disable=g-import-not-at-top
    fn = self.helpers[name]
    if apply_rw.dynamic:
      return None
    rw = apply_rewriter.ApplyRewriter(up, info, fn)
    rw.fields = set()  # helper locals are not fields
    rw.assigned_fields = []
    rw.names, rw.dynamic, rw.todo_all = apply_rw.names, False, None
    body = walk.transform(fn.body, rw)
    return fn.with_changes(body=body)


def _inlining_plan(resolver, local_vars, helpers):
  """A legacy auto-name plan that runs each helper where it is called."""

  class _Plan(name_plan.NamePlan):

    def __init__(self):
      super().__init__(resolver, local_vars)
      self._active = []
      # per expansion: the helper's parameters whose default is None ->
      # whether this call gives them (``name=name`` names the submodule
      # then, else legacy auto-named it)
      self._given = []

    def _name_kind(self, node):
      if not self._given:
        return super()._name_kind(node)
      kind = _shared.name_kind(node)
      arg = _shared.call_name(node)
      if kind == 'named' and isinstance(arg.value, cst.Name):
        given = self._given[-1].get(arg.value.value, True)
        if given is None:  # a call with *args / **kwargs: the run decides
          self._set_dynamic()
          return 'auto'
        if given is False:
          return 'auto'
      return kind

    def leave_Call(self, node):
      super().leave_Call(node)
      a = _self_attr(node.func)
      if a in helpers:
        if a in self._active:
          self.dynamic = True  # recursion: no static plan
          return
        self._active.append(a)
        self._given.append(_given_params(helpers[a], node))
        helpers[a].body.visit(self)
        self._given.pop()
        self._active.pop()

  return _Plan()


def _given_params(fn, call):
  """{parameter of helper ``fn`` whose default is None: whether ``call``
  (``self.fn(...)``) gives it a value other than None}."""
  ps = fn.params
  positional = [p.name.value for p in list(ps.posonly_params) + list(
      ps.params)][1:]  # past self
  given = {p: False for p in _shared.none_default_params(fn)}
  for i, a in enumerate(call.args):
    if a.star:
      return {p: None for p in given}  # unknown: as any other name
    k = a.keyword.value if a.keyword is not None else (
        positional[i] if i < len(positional) else None)
    if k in given:
      given[k] = not (isinstance(a.value, cst.Name) and a.value.value == 'None')
  return given


def assigns_self(apply):
  """Whether ``apply`` assigns an attribute of self (``self.X = v``): a
  frozen linen module refuses that in ``__call__``, so the plan threads it
  as a local even when the class has no other method."""
  s = _Scan(set())
  apply.body.visit(s)
  return bool(s.assigns or s.bad_assign)


def _makes_modules_for_later(fn):
  found = []

  class V(walk.FastVisitor):

    def visit_Attribute(self, node):
      if node.attr.value in ('shared', 'partial'):
        found.append(node)

  fn.body.visit(V())
  return bool(found)


def prepare(up, node, info, apply):
  """A Plan for the class ``node`` (its methods besides ``apply``)."""
  fns = {s.name.value: s for s in node.body.body
         if isinstance(s, cst.FunctionDef) and s is not apply}
  plain = {n: f for n, f in fns.items() if not f.decorators}
  scans = {}
  for n, f in [('apply', apply)] + list(plain.items()):
    s = _Scan(set(plain))
    f.body.visit(s)
    scans[n] = s
  # helpers reached from apply through direct calls
  reached, todo = set(), ['apply']
  while todo:
    for c in scans[todo.pop()].calls:
      if c not in reached:
        reached.add(c)
        todo.append(c)
  # in source order, so the report is the same on every run
  originals = {id(f): n for n, f in fns.items() if n in reached}
  left = sorted(set(fns) - reached, key=list(fns).index)

  def fail(why):
    return Plan(apply=apply, helpers={}, originals={}, left=list(fns),
                why=why)

  if any(_makes_modules_for_later(fns[n]) for n in reached):
    # ``X.shared(...)`` / ``X.partial(...)`` made in a helper and used by
    # its caller (legacy seq2seq, vae): linen wants them in setup; the
    # class keeps its TODO naming the methods.
    return fail(None)

  escaped = set().union(*(s.escaped for s in scans.values()))
  if escaped & reached:
    return fail(f'methods {sorted(escaped & reached)} are used other than '
                'by a direct self.m(...) call')
  for n in reached:
    if scans[n].assigns or scans[n].bad_assign:
      return fail(f'method {n} assigns attributes of self')
  if scans['apply'].bad_assign:
    return fail('apply assigns self.'
                f'{scans["apply"].bad_assign[0]} other than by a plain '
                'assignment')
  fields = set(info.fields) | ({info.var_kw} if info.var_kw else set())
  top_level = {id(s) for line in apply.body.body
               if isinstance(line, cst.SimpleStatementLine) for s in line.body}
  drop, to_local, local_attrs = set(), set(), set()
  apply_params = set(info.params)
  assigned = {}
  for stmt, x in scans['apply'].assigns:
    v = stmt.value
    same = isinstance(v, cst.Name) and v.value == x and x in apply_params
    if x in assigned and assigned[x] != same:
      return fail(f'self.{x} is assigned more than once in apply')
    assigned[x] = same
    if same:
      if id(stmt) not in top_level:
        return fail(f'apply assigns self.{x} inside a block')
      drop.add(id(stmt))
      if x not in fields:
        local_attrs.add(x)  # a call parameter: already a local
    elif x in fields or x in RESERVED:
      return fail(f'apply assigns self.{x}, which is a field or a linen '
                  'attribute')
    elif x in scans['apply'].names:
      return fail(f'apply assigns self.{x} and also uses a local {x!r}')
    else:
      to_local.add(id(stmt))
      local_attrs.add(x)
  # helpers that read a threaded attribute, directly or through helpers
  needs = {n: set(scans[n].reads) & local_attrs for n in reached}
  changed = True
  while changed:
    changed = False
    for n in reached:
      for c in scans[n].calls:
        extra = needs[c] - needs[n]
        if extra:
          needs[n] |= extra
          changed = True
  for n in reached:
    clash = needs[n] & scans[n].names
    if clash:
      return fail(f'method {n} already uses the name {sorted(clash)[0]!r}')
  order = {n: sorted(v) for n, v in needs.items()}
  new_apply = apply.visit(_Thread(local_attrs, order, drop, to_local))
  helpers = {}
  notes = []
  for n in sorted(reached, key=list(fns).index):
    fn = fns[n].visit(_Thread(set(order[n]), order, set(), set()))
    if order[n]:
      fn = _add_kwonly(fn, order[n])
      notes.append(f'{n}: per-call self.{", self.".join(order[n])} -> '
                   'keyword argument')
    helpers[n] = fn
  return Plan(apply=new_apply, helpers=helpers, originals=originals,
              left=left, notes=notes)


RESERVED = frozenset(('name', 'parent', 'scope', 'variables', 'params',
                      'param', 'variable', 'apply', 'init', 'setup', 'bind',
                      'make_rng', 'is_initializing', 'path'))
