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


def containers(body, element):
  """{local: [element, ...]} for the locals of ``body`` (a function body,
  nested functions included) that hold containers of elements -- what
  ``element(expr)`` recognises (a shared instance), or None -- at any
  depth: ``[X.shared(...) for ...]``, ``v.append(e)`` / ``v.insert(i, e)``
  / ``v.extend([...])``, ``v[k] = e``, list / tuple / dict literals,
  containers of such containers; and the names a ``for`` loop binds over
  one (``for blk in blocks``, ``for i, blk in enumerate(blocks)``), which
  may hold an element itself.  A local assigned the element directly
  (``v = X.shared(...)``) is not here: that is a plain local."""
  out = {}

  def elems(expr):
    e = element(expr)
    if e is not None:
      return [e]
    if isinstance(expr, cst.Name):
      return out.get(expr.value, [])
    if isinstance(expr, (cst.List, cst.Tuple, cst.Set)):
      found = []
      for el in expr.elements:
        found += elems(el.value)
      return found
    if isinstance(expr, cst.Dict):
      found = []
      for el in expr.elements:
        found += elems(el.value)
      return found
    if isinstance(expr, (cst.ListComp, cst.SetComp, cst.GeneratorExp)):
      return elems(expr.elt)
    if isinstance(expr, cst.DictComp):
      return elems(expr.value)
    root = _container_root(expr)
    return out.get(root, []) if root else []

  def add(name, found):
    if not found:
      return False
    have = out.setdefault(name, [])
    new = [e for e in found if e not in have]
    have += new
    return bool(new)

  class V(walk.FastVisitor):

    def __init__(self):
      self.changed = False

    def visit_Assign(self, node):
      for t in node.targets:
        t = t.target
        if isinstance(t, cst.Name):
          if element(node.value) is None:
            self.changed |= add(t.value, elems(node.value))
        elif _container_root(t):
          self.changed |= add(_container_root(t), elems(node.value))

    def visit_Call(self, node):
      f = node.func
      if (isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name)
          and f.attr.value in ('append', 'insert', 'extend') and node.args):
        self.changed |= add(f.value.value, elems(node.args[-1].value))

    def visit_For(self, node):
      it, target = node.iter, node.target
      if (isinstance(it, cst.Call) and cst_util.dotted(it.func) == 'enumerate'
          and it.args and isinstance(target, cst.Tuple)
          and len(target.elements) == 2):
        it, target = it.args[0].value, target.elements[1].value
      if isinstance(target, cst.Name):
        self.changed |= add(target.value, elems(it))

  for _ in range(4):  # to a fixpoint: appends before the loops over them
    v = V()
    body.visit(v)
    if not v.changed:
      break
  return out


def container_call(func, found):
  """The elements a call of ``func`` calls when ``func`` is a local of
  ``found`` (``containers``) or a subscript of one (``blocks[0]``), else
  None."""
  if isinstance(func, cst.Name):
    return found.get(func.value)
  root = _container_root(func)
  return found.get(root) if root else None


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
