"""Facts of shared-module calls (rules/helpers.py rewrites them).

``shared_calls`` finds a class's calls of modules it shares
(``M.shared(...)`` kept in a local or an attribute) and the class parameters
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
  return owner.value if isinstance(owner, cst.Name) else None


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
  calls, kws = [], []

  class C(walk.FastVisitor):

    def visit_Call(self, node):
      if not (isinstance(node.func, cst.Name) and node.func.value in local):
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
      cls = local[node.func.value]
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
      child = codebase.module(facts, cls) if facts else None
      if child is None:
        continue
      bound = codebase.partial_kwargs.get(child.name, set())
      for k in keys:
        if k in child.fields and k not in bound:
          child.fields.remove(k)
          child.call.append(k)
      child.call.sort(key=child.params.index)
