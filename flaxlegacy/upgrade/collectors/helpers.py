"""Facts of shared-module calls (rules/helpers.py rewrites them).

``shared_calls`` finds a class's calls of modules it shares
(``M.shared(...)`` kept in a local or an attribute, or in a container:
``blocks[i](x)``, ``for blk in blocks``; ``containers``) and the class parameters
passed to them; ``move_shared_call_params`` makes those call parameters of
the class (facts.py ``CodebaseFacts.finish``).
"""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import walk


def _shared_class(value):
  """'C' for ``C.shared(...)`` / ``C.partial(...).shared(...)``, else None."""
  if not isinstance(value, cst.Call):
    return None
  f = value.func
  if not (isinstance(f, cst.Attribute) and f.attr.value == 'shared'):
    return None
  owner = f.value
  if (isinstance(owner, cst.Call) and isinstance(owner.func, cst.Attribute)
      and owner.func.attr.value == 'partial'):
    owner = owner.func.value
  if isinstance(owner, cst.Name):
    return owner.value
  name = cst_util.dotted(owner)  # module.C, module a file of the codebase
  return name if name and name.count('.') == 1 else None


def _container_root(func):
  """The name ``func`` is a subscript of (``blocks[i][j]``), or None."""
  if not isinstance(func, cst.Subscript):
    return None
  while isinstance(func, cst.Subscript):
    func = func.value
  return func.value if isinstance(func, cst.Name) else None


# calls that change a list in place (a box's last element: see ``Held``)
_MUTATORS = ('append', 'insert', 'extend', 'pop', 'reverse', 'sort',
             'remove', 'clear')


class Held:
  """What the containers of one body hold (``containers``), with their
  nesting: a local's values are elements (``('e', element)``) or
  containers (``('b', key)``, one key per list literal, comprehension or
  local the body fills), and each container's values the same, so
  ``rows[i][j]`` reads two levels down and ``rows[i]`` is a container,
  not an element.  ``last``: the container's last element where the
  source makes it certain (``Held.called`` reads ``blocks[-1]`` with it):
  a list made by a literal assigned to a local bound nowhere else, whose
  textually last change is a plain ``v.append(e)`` in the same block (or,
  unchanged, the literal's last element); a call reads it only after that
  ``append``."""

  def __init__(self, element):
    self.element = element
    self.names = {}  # local -> [value]
    self.items = {}  # container key -> [value]
    self.last = {}  # container key -> ([value], text position)
    self.order = {}  # id(call.func) -> text position
    self.changed = False

  def _add(self, have, found):
    new = [v for v in found if v not in have]
    have += new
    self.changed |= bool(new)

  def add_name(self, name, found):
    self._add(self.names.setdefault(name, []), found)

  def add_item(self, key, found):
    self._add(self.items.setdefault(key, []), found)

  def boxes(self, values):
    return [v[1] for v in values if v[0] == 'b']

  def contents(self, values):
    """The values of the containers among ``values``."""
    out = []
    for k in self.boxes(values):
      out += [v for v in self.items.get(k, ()) if v not in out]
    return out

  def _box(self, key, found):
    self._add(self.items.setdefault(key, []), found)
    return [('b', key)]

  def name_boxes(self, name):
    """The containers local ``name`` holds; one of its own where it holds
    none (``v = list()`` then ``v.append(e)``)."""
    boxes = self.boxes(self.names.get(name, ()))
    if not boxes:
      self.add_name(name, [('b', ('name', name))])
      self.items.setdefault(('name', name), [])
      boxes = [('name', name)]
    return boxes

  def values(self, expr, at=None):
    """What ``expr`` can hold; ``at``: the text position of the call it
    is the function of (``[-1]`` read with ``last`` after it)."""
    e = self.element(expr)
    if e is not None:
      return [('e', e)]
    if isinstance(expr, cst.Name):
      return list(self.names.get(expr.value, ()))
    if isinstance(expr, (cst.List, cst.Tuple, cst.Set, cst.Dict)):
      found = []
      for el in expr.elements:
        if isinstance(el, (cst.StarredElement, cst.StarredDictElement)):
          found += self.contents(self.values(el.value))
        else:
          found += self.values(el.value)
      return self._box(id(expr), found)
    if isinstance(expr, (cst.ListComp, cst.SetComp, cst.GeneratorExp)):
      return self._box(id(expr), self.values(expr.elt))
    if isinstance(expr, cst.DictComp):
      return self._box(id(expr), self.values(expr.value))
    if isinstance(expr, cst.Subscript):
      base = self.values(expr.value, at)
      index = _index(expr)
      if isinstance(index, cst.Slice):  # a part: its elements, no last
        out = []
        for k in self.boxes(base):
          self.items.setdefault(('part', k), self.items.setdefault(k, []))
          out.append(('b', ('part', k)))
        return out
      out = []
      for k in self.boxes(base):
        last = self.last.get(k)
        if (at is not None and last is not None and last[1] < at
            and _minus_one(index)):
          vals = last[0]
        else:
          vals = self.items.get(k, ())
        out += [v for v in vals if v not in out]
      return out
    return []

  def called(self, func):
    """The elements a call of ``func`` (an original node of the body)
    calls, or None."""
    if not isinstance(func, (cst.Name, cst.Subscript)):
      return None
    found = [v[1] for v in self.values(func, self.order.get(id(func)))
             if v[0] == 'e']
    return found or None


def _index(sub):
  """The index expression (or ``cst.Slice``) of ``v[i]``, else None."""
  if len(sub.slice) != 1:
    return None
  s = sub.slice[0].slice
  return s if isinstance(s, cst.Slice) else getattr(s, 'value', None)


def _minus_one(index):
  return (isinstance(index, cst.UnaryOperation)
          and isinstance(index.operator, cst.Minus)
          and isinstance(index.expression, cst.Integer)
          and index.expression.value == '1')


def containers(body, element):
  """A ``Held`` of the locals of ``body`` (a function body, nested
  functions included) that hold containers of elements -- what
  ``element(expr)`` recognises (a shared instance), or None -- at any
  depth: ``[X.shared(...) for ...]``, ``v.append(e)`` / ``v.insert(i, e)``
  / ``v.extend([...])``, ``v[k] = e``, list / tuple / dict literals,
  containers of such containers; and the names a ``for`` loop binds over
  one (``for blk in blocks``, ``for i, blk in enumerate(blocks)``), which
  may hold an element itself.  A local assigned the element directly
  (``v = X.shared(...)``) is not here: that is a plain local.
  ``container_call`` reads it."""
  held = Held(element)

  class V(walk.FastVisitor):

    def visit_Assign(self, node):
      for t in node.targets:
        t = t.target
        if isinstance(t, cst.Name):
          if element(node.value) is None:
            held.add_name(t.value, held.values(node.value))
        elif isinstance(t, cst.Subscript) and _container_root(t):
          found = held.values(node.value)
          for k in _target_boxes(held, t.value):
            held.add_item(k, found)

    def visit_Call(self, node):
      f = node.func
      if (isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name)
          and f.attr.value in ('append', 'insert', 'extend') and node.args):
        found = held.values(node.args[-1].value)
        if f.attr.value == 'extend':
          found = held.contents(found)
        if found:
          for k in held.name_boxes(f.value.value):
            held.add_item(k, found)

    def visit_For(self, node):
      it, target = node.iter, node.target
      if (isinstance(it, cst.Call) and cst_util.dotted(it.func) == 'enumerate'
          and it.args and isinstance(target, cst.Tuple)
          and len(target.elements) == 2):
        it, target = it.args[0].value, target.elements[1].value
      if isinstance(target, cst.Name):
        held.add_name(target.value, held.contents(held.values(it)))

  for _ in range(4):  # to a fixpoint: appends before the loops over them
    held.changed = False
    body.visit(V())
    if not held.changed:
      break
  if any(v[0] == 'e' for vals in held.items.values() for v in vals):
    order = _Order(held)  # (a container of elements: most bodies have none)
    body.visit(order)
    order.done()
  return held


def container_call(func, found):
  """The elements a call of ``func`` calls when ``func`` is a local of
  ``found`` (``containers``) or a subscript of one (``blocks[0]``,
  ``rows[i][-1]``), else None."""
  return found.called(func)


def _target_boxes(held, expr):
  """The containers ``expr`` (``v`` of ``v[k] = e``, or ``rows[i]``)
  holds; one of their own where they hold none (``v = dict()``, ``rows =
  [[None] * n ...]``)."""
  if isinstance(expr, cst.Name):
    return held.name_boxes(expr.value)
  if not isinstance(expr, cst.Subscript):
    return held.boxes(held.values(expr))
  outer = _target_boxes(held, expr.value)
  inner = held.boxes(held.contents([('b', k) for k in outer]))
  if not inner:
    for k in outer:
      held.items.setdefault(('in', k), [])
      held.add_item(k, [('b', ('in', k))])
      inner.append(('in', k))
  return inner


class _Order(walk.FastVisitor):
  """The last pass of ``containers``: the text position of every call,
  and each container's ``last`` (see ``Held``)."""

  def __init__(self, held):
    self.held = held
    self.at = 0
    self.blocks = [None]
    self.depth = 0  # nested functions and lambdas
    self.direct = set()  # ids of calls that are a whole statement
    self.binds = {}  # local -> how many bindings
    self.made = []  # (key, local, block, depth, position, literal)
    self.changes = {}  # key -> [(position, kind, block, depth, via, arg)]

  def leave_IndentedBlock(self, node):
    self.blocks.pop()

  def visit_IndentedBlock(self, node):
    self.blocks.append(id(node))

  def visit_SimpleStatementSuite(self, node):
    self.blocks.append(id(node))

  def leave_SimpleStatementSuite(self, node):
    self.blocks.pop()

  def visit_FunctionDef(self, node):
    self.depth += 1
    self._bind_params(node.params)

  def leave_FunctionDef(self, node):
    self.depth -= 1

  def visit_Lambda(self, node):
    self.depth += 1
    self._bind_params(node.params)

  def leave_Lambda(self, node):
    self.depth -= 1

  def _bind_params(self, ps):
    for p in (list(ps.posonly_params) + list(ps.params)
              + list(ps.kwonly_params)):
      self._bind(p.name)
    for p in (ps.star_arg, ps.star_kwarg):
      if isinstance(p, cst.Param):
        self._bind(p.name)

  def _bind(self, target):
    if isinstance(target, cst.Name):
      self.binds[target.value] = self.binds.get(target.value, 0) + 1
    elif isinstance(target, (cst.Tuple, cst.List)):
      for e in target.elements:
        self._bind(e.value)
    elif isinstance(target, cst.StarredElement):
      self._bind(target.value)

  def _change(self, expr, kind, via=None, arg=None):
    """A change of the containers ``expr`` holds."""
    for k in self.held.boxes(self.held.values(expr)):
      self.changes.setdefault(k, []).append(
          (self.at, kind, self.blocks[-1], self.depth, via, arg))

  def visit_SimpleStatementLine(self, node):
    for s in node.body:
      if isinstance(s, cst.Expr) and isinstance(s.value, cst.Call):
        self.direct.add(id(s.value))

  def visit_Assign(self, node):
    self.at += 1
    for t in node.targets:
      t = t.target
      self._bind(t)
      if isinstance(t, cst.Subscript):
        self._change(t.value, 'set')
      elif isinstance(t, cst.Name) and isinstance(node.value,
                                                  (cst.List, cst.Tuple)):
        self.made.append((id(node.value), t.value, self.blocks[-1],
                          self.depth, self.at, node.value))

  def visit_AugAssign(self, node):
    self.at += 1
    self._bind(node.target)
    t = node.target
    self._change(t.value if isinstance(t, cst.Subscript) else t, 'set')

  def visit_AnnAssign(self, node):
    self._bind(node.target)

  def visit_Del(self, node):
    self.at += 1
    for t in ([e.value for e in node.target.elements]
              if isinstance(node.target, cst.Tuple) else [node.target]):
      if isinstance(t, cst.Subscript):
        self._change(t.value, 'set')

  def visit_For(self, node):
    self._bind(node.target)

  def visit_CompFor(self, node):
    self._bind(node.target)

  def visit_AsName(self, node):
    self._bind(node.name)

  def visit_Call(self, node):
    self.at += 1
    self.held.order[id(node.func)] = self.at
    f = node.func
    stores = False
    if isinstance(f, cst.Attribute) and f.attr.value in _MUTATORS:
      stores = f.attr.value in ('append', 'insert', 'extend')
      direct = id(node) in self.direct
      via = f.value.value if isinstance(f.value, cst.Name) else None
      arg = node.args[-1].value if node.args else None
      self._change(f.value, f.attr.value if direct else 'other', via, arg)
    if not stores:  # a container handed to a call may be changed there
      for a in node.args:
        if isinstance(a.value, cst.Name):
          self._change(a.value, 'other')

  def done(self):
    held = self.held
    for key, name, block, depth, at, literal in self.made:
      if self.binds.get(name, 0) != 1:
        continue
      changes = sorted(self.changes.get(key, ()), key=lambda c: c[0])
      if any(c[0] < at or c[3] != depth for c in changes):
        continue
      if not changes:
        els = literal.elements
        if els and not isinstance(els[-1], cst.StarredElement):
          held.last[key] = (held.values(els[-1].value), at)
        continue
      pos, kind, where, _, via, arg = changes[-1]
      if kind == 'append' and where == block and via == name and arg is not None:
        held.last[key] = (held.values(arg), pos)


def _assigned_shared(fn):
  """{variable: class} for ``v = C.shared(...)`` in a function body, and
  the classes it returns, in order (``return a, b``)."""
  found, returns = {}, []

  class V(walk.FastVisitor):

    def visit_Assign(self, node):
      if len(node.targets) == 1 and isinstance(node.targets[0].target,
                                               cst.Name):
        c = _shared_class(node.value)
        if c:
          found[node.targets[0].target.value] = c

    def visit_Return(self, node):
      v = node.value
      elems = v.elements if isinstance(v, cst.Tuple) else [cst.Element(v)]
      returns.append([found.get(e.value.value) if isinstance(
          e.value, cst.Name) else _shared_class(e.value) for e in elems])

  fn.visit(V())
  return found, returns


def shared_calls(class_node, apply, params):
  """Calls of shared instances in ``apply``: (child_calls, shared_kw).

  ``child_calls``: ``(class, [positional param or None], {kw: param})`` as
  facts.ModuleInfo.child_calls; ``shared_kw``: ``(class, {keywords})``.
  """
  if apply is None:
    return [], []
  methods = {s.name.value: s for s in class_node.body.body
             if isinstance(s, cst.FunctionDef)}
  local, _ = _assigned_shared(apply)

  class V(walk.FastVisitor):

    def visit_Assign(self, node):
      t = node.targets[0].target if len(node.targets) == 1 else None
      v = node.value
      if not (isinstance(t, (cst.Tuple, cst.Name)) and isinstance(v, cst.Call)
              and isinstance(v.func, cst.Attribute)
              and cst_util.dotted(v.func.value) == 'self'
              and v.func.attr.value in methods):
        return
      _, returns = _assigned_shared(methods[v.func.attr.value])
      if len(returns) != 1:
        return
      names = ([e.value for e in t.elements] if isinstance(t, cst.Tuple)
               else [t])
      if len(names) != len(returns[0]) or isinstance(t, cst.Name):
        return
      for n, c in zip(names, returns[0]):
        if isinstance(n, cst.Name) and c:
          local[n.value] = c

  apply.visit(V())
  held = containers(apply.body, lambda e: _shared_class(e) or (
      local.get(e.value) if isinstance(e, cst.Name) else None))
  # blocks[i](x, mask=m): a call of an instance a container holds
  calls, kws = [], []

  class C(walk.FastVisitor):

    def visit_Call(self, node):
      if isinstance(node.func, cst.Name) and node.func.value in local:
        classes = [local[node.func.value]]
      else:
        classes = container_call(node.func, held)
        if not classes:
          return
      pos, kw, keys = [], {}, set()
      for a in node.args:
        if a.star:
          continue
        p = (a.value.value if isinstance(a.value, cst.Name)
             and a.value.value in params else None)
        if a.keyword is None:
          pos.append(p)
        else:
          keys.add(a.keyword.value)
          if p is not None:
            kw[a.keyword.value] = p
      for cls in classes:
        calls.append((cls, pos, kw))
        if keys:
          kws.append((cls, keys))

  apply.visit(C())
  return calls, kws


def move_shared_call_params(codebase, infos):
  """A field passed when a shared instance is called becomes a call param."""
  for info in infos:
    facts = codebase.files.get(info.file)
    for cls, keys in getattr(info, 'shared_kw', ()):
      child = _module(codebase, facts, cls)
      if child is None:
        continue
      bound = codebase.partial_kwargs.get(child.name, set())
      for k in keys:
        if k in child.fields and k not in bound:
          child.fields.remove(k)
          child.call.append(k)
      child.call.sort(key=child.params.index)


def _module(codebase, facts, cls):
  """The module class ``cls`` (``C`` or ``module.C``) seen from ``facts``."""
  if facts is None:
    return None
  if '.' not in cls:
    return codebase.module(facts, cls)
  head, _, name = cls.partition('.')
  f = codebase.imported_file(facts, head)
  info = f.modules.get(name) if f is not None else None
  return None if info is None or info.problems else info
