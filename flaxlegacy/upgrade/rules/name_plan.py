"""Legacy auto-names of the submodules a module body creates.

Legacy counted one auto-name per parent across all module types (and
``.shared()`` without a name took a bare digit); linen counts per type.
``NamePlan`` walks a body in execution order and records each submodule
creation; ``plan_names`` gives each creation its legacy name, or None where
the count depends on a loop or a condition the plan cannot unroll (the
rewriter then counts at run time).  rules/methods.py subclasses the plan to
run helper methods where they are called; rules/linen_names.py reads it for
``--names linen``.
"""

import collections

import libcst as cst

from flaxlegacy.upgrade import walk
from flaxlegacy.upgrade.rules import _shared
from flaxlegacy.upgrade.rules import attention as attention_rule


def type_name(ref):
  """Legacy default name of what ``ref`` constructs, or None (runtime)."""
  if ref.kind == 'layer':
    return ref.target.legacy
  if ref.kind == 'attention':
    return attention_rule.TYPE_NAME
  if ref.kind == 'class':
    return None if ref.extra in ('ambiguous', 'field', 'runtime', 'mixed') else (
        ref.target.name)
  if ref.kind in ('partial', 'instance'):
    return type_name(ref.target)
  return None


def _values_class_name(up, func):
  """The one class name every value of ``func`` (flow.py) is, or None."""
  values = up.flow_values(func) if hasattr(up, 'flow_values') else None
  if not values or any(v[0] != 'class' for v in values):
    return None
  names = {v[2] for v in values}
  return names.pop() if len(names) == 1 else None


def partial_named(ref):
  """Whether some ``.partial(name=...)`` in a partial chain names calls."""
  while ref is not None and ref.kind == 'partial':
    # (``.partial(name=None)`` names nothing: legacy's default)
    if ref.extra is not None and _shared.name_kind(ref.extra) == 'named':
      return True
    ref = ref.target
  return False


class _Dynamic(Exception):
  pass


class NamePlan(walk.FastVisitor):
  """Auto-named submodule calls in legacy evaluation order.

  ``events``: (node id, type name) in the order legacy consumes its counter
  (a call consumes it after its arguments ran); a loop over a literal
  tuple/list or ``range(<int>)`` repeats its events; any other loop or
  condition around an auto-named call makes the plan dynamic.
  """

  def __init__(self, resolver, local_vars):
    self.resolver = resolver
    self.locals = local_vars
    self.events = []
    self.refs = {}  # node id -> the Ref its call constructs (names plan)
    self.dynamic = False
    # the events before the first whose count or type only the run knows:
    # their legacy names are certain even in a dynamic plan
    self.static_prefix = None
    self.nodes = {}  # event node id -> the call node
    self.nested = False  # an auto-named call inside another's arguments
    self._open_calls = 0
    self._open_ids = []  # ids of the auto-named calls whose arguments run
    # auto-named calls nested in another's arguments, and those others:
    # legacy numbers the inner one first (it runs first), linen the outer
    # one (it is constructed first), so they always get explicit names
    self.nested_ids = set()
    self._unknown_depth = 0
    self._loop_stack = []

  def _ref(self, call):
    return self.resolver(call.func)

  def _name_kind(self, node):
    return _shared.name_kind(
        node, getattr(self.resolver.up, 'maybe_none', frozenset()))

  def visit_Call(self, node):
    ref = self._ref(node)
    auto = (ref is not None and ref.kind in ('layer', 'class', 'partial',
                                             'attention', 'instance')
            and self._name_kind(node) != 'named')
    if auto and self._open_calls:
      self.nested = True
      self.nested_ids.add(id(node))
      self.nested_ids.update(self._open_ids)
    if auto:
      self._open_calls += 1
      self._open_ids.append(id(node))
    return True

  def leave_Call(self, node):
    ref = self._ref(node)
    f = node.func
    if (isinstance(f, cst.Attribute) and f.attr.value == 'shared'
        and self.resolver(f.value) is not None and _shared.call_name(node) is None):
      self.refs[id(node)] = _shared.Ref('shared', self.resolver(f.value), node)
      self._event(node, None)
      return
    # legacy recurrent cells (rules/recurrent.py) take the counter too
    from flaxlegacy.upgrade.rules import recurrent  # pylint: disable=g-import-not-at-top
    up = self.resolver.up
    if _shared.call_name(node) is None and recurrent.in_module(up):
      if recurrent.cell_method(up, f, 'shared'):
        self._event(node, None)
        return
      cell = recurrent.cell(up, f)
      if cell:
        self._event(node, cell)
        return
      # a call of a local holding a cell's partial, no name given there
      cell = recurrent.unnamed_cell_partial_call(up, node)
      if cell:
        self._event(node, cell)
        return
    if ref is None or ref.kind not in ('layer', 'class', 'partial',
                                       'attention', 'instance'):
      return
    kind = self._name_kind(node)
    if kind == 'named':
      return
    self._open_calls -= 1
    if self._open_ids and self._open_ids[-1] == id(node):
      self._open_ids.pop()
    if partial_named(ref):
      return  # X.partial(name=...) names every call
    if kind == 'maybe':
      # ``name=p``: only the runs where p is None draw the counter
      self._set_dynamic()
    self.refs[id(node)] = ref
    name = type_name(ref)
    if name is None and isinstance(f, cst.Attribute):
      # a module known by its values (``other_file.Alias(x)`` where
      # ``Alias = C.partial(...)``): legacy named it after the class of
      # the value, so the name is known where every value is one class;
      # otherwise it depends on the run (never a bare digit, which only
      # an unnamed ``.shared()`` takes)
      name = _values_class_name(self.resolver.up, f)
      if name is None:
        self._set_dynamic()
    self._event(node, name)

  def _set_dynamic(self):
    if not self.dynamic:
      self.static_prefix = len(self.events)
    self.dynamic = True

  def _event(self, node, type_name):
    if self._unknown_depth or type_name is None and not isinstance(
        node.func, cst.Attribute):
      self._set_dynamic()
    self.nodes[id(node)] = node
    self.events.append((id(node), type_name, len(self._loop_stack)))

  def _enter_unknown(self):
    self._unknown_depth += 1

  def _leave_unknown(self):
    self._unknown_depth -= 1

  def visit_For(self, node):
    n = _literal_trips(node)
    if n is None or _has_break(node):
      self._enter_unknown()
      self._loop_stack.append(None)
    else:
      self._loop_stack.append((len(self.events), n))

  def leave_For(self, node):
    item = self._loop_stack.pop()
    if item is None:
      self._leave_unknown()
      return
    start, n = item
    body = self.events[start:]
    self.events[start:] = body * n

  def visit_While(self, node):
    self._enter_unknown()

  def leave_While(self, node):
    self._leave_unknown()

  def visit_If(self, node):
    self._enter_unknown()

  def leave_If(self, node):
    self._leave_unknown()

  def visit_IfExp(self, node):
    self._enter_unknown()

  def leave_IfExp(self, node):
    self._leave_unknown()

  def visit_BooleanOperation(self, node):
    self._enter_unknown()

  def leave_BooleanOperation(self, node):
    self._leave_unknown()

  def visit_CompFor(self, node):
    self._enter_unknown()

  def leave_CompFor(self, node):
    self._leave_unknown()

  def visit_Lambda(self, node):
    self._enter_unknown()

  def leave_Lambda(self, node):
    self._leave_unknown()

  def visit_Try(self, node):
    self._enter_unknown()

  def leave_Try(self, node):
    self._leave_unknown()

  def visit_FunctionDef(self, node):
    self._enter_unknown()

  def leave_FunctionDef(self, node):
    self._leave_unknown()


def _literal_trips(node):
  it = node.iter
  if isinstance(it, (cst.Tuple, cst.List)):
    if any(isinstance(e, cst.StarredElement) for e in it.elements):
      return None
    return len(it.elements)
  if (isinstance(it, cst.Call) and isinstance(it.func, cst.Name)
      and it.func.value in ('range', 'enumerate')):
    if it.func.value == 'enumerate' and len(it.args) == 1:
      inner = it.args[0].value
      if isinstance(inner, (cst.Tuple, cst.List)):
        return len(inner.elements)
      return None
    if it.func.value == 'range' and len(it.args) == 1 and isinstance(
        it.args[0].value, cst.Integer):
      return int(it.args[0].value.value)
  return None


def _has_break(node):
  found = []

  class V(walk.FastVisitor):

    def visit_Break(self, n):
      found.append(n)

    def visit_Continue(self, n):
      found.append(n)

  node.body.visit(V())
  return bool(found)


def plan_names(events, explicit=()):
  """Per call node id: None (linen's auto-name equals legacy's) or a name.

  ``explicit``: ids that always get their legacy name written (nested
  auto-named calls: linen's construction order is not legacy's there).
  Returns None if a call that runs several times needs varying names.
  """
  keep = {}
  counts = collections.Counter(e[0] for e in events)
  for node_id, type_name, _ in events:
    keep[node_id] = type_name is not None and node_id not in explicit
  names = {}
  while True:
    per_type = collections.Counter()
    wrong = set()
    legacy_names = collections.defaultdict(set)
    for index, (node_id, type_name, _) in enumerate(events):
      legacy = f'{type_name}_{index}' if type_name else str(index)
      legacy_names[node_id].add(legacy)
      if keep[node_id]:
        linen = f'{type_name}_{per_type[type_name]}'
        per_type[type_name] += 1
        if linen != legacy:
          wrong.add(node_id)
    if not wrong:
      break
    for node_id in wrong:
      keep[node_id] = False
  for node_id, legacy in legacy_names.items():
    if keep[node_id]:
      names[node_id] = None
    elif counts[node_id] > 1:
      return None
    else:
      names[node_id] = legacy.pop()
  return names
