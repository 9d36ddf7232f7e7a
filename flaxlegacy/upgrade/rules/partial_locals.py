"""Rule: a local that holds ``X.partial(...)`` or a module given from outside.

The legacy transformer examples (wmt) pick their embedding like this::

    if shared_embedding is None:
      input_embed = nn.Embed.partial(num_embeddings=..., features=...)
    else:
      input_embed = shared_embedding      # a ``.shared()`` module
    x = input_embed(x)

``functools.partial(nn.Embed, ...)`` would make ``input_embed(x)`` construct
a module from ``x``.  Where the local is called exactly once, outside loops,
conditions and nested functions, the partial branch becomes a linen module
*instance* with the legacy auto-name of that call
(``nn.Embed(num_embeddings=..., features=..., name='Embed_0')``), and the
call ``input_embed(x)`` stays as it is: it calls either instance.  Any other
use of such a local (a module method such as ``input_embed.attend(...)``)
gets a TODO: a legacy module method called on a ``.partial`` creates a
module of its own, on an instance linen uses the same parameters.
"""

import libcst as cst

from flaxlegacy.upgrade import walk


class _Scan(walk.FastVisitor):
  """Assignments, calls and other uses of the local names of one body."""

  def __init__(self, resolver):
    self.resolver = resolver
    self.assigns = {}  # name -> [(value node, ref)]
    self.calls = {}  # name -> [(call node, unsafe)]
    self.other = {}  # name -> [node]
    self._unsafe = 0

  def visit_Assign(self, node):
    for t in node.targets:
      if isinstance(t.target, cst.Name):
        self.assigns.setdefault(t.target.value, []).append(
            (node.value, self.resolver(node.value)))
      else:
        for n in walk.target_names(t.target):
          self.assigns.setdefault(n, []).append((None, None))

  def visit_For(self, node):
    for n in walk.target_names(node.target):
      self.assigns.setdefault(n, []).append((None, None))
    self._unsafe += 1

  def leave_For(self, node):
    self._unsafe -= 1

  def visit_While(self, node):
    self._unsafe += 1

  def leave_While(self, node):
    self._unsafe -= 1

  def visit_CompFor(self, node):
    self._unsafe += 1

  def leave_CompFor(self, node):
    self._unsafe -= 1

  def visit_Lambda(self, node):
    self._unsafe += 1

  def leave_Lambda(self, node):
    self._unsafe -= 1

  def visit_FunctionDef(self, node):
    self._unsafe += 1

  def leave_FunctionDef(self, node):
    self._unsafe -= 1

  def visit_Call(self, node):
    if isinstance(node.func, cst.Name):
      self.calls.setdefault(node.func.value, []).append(
          (node, self._unsafe > 0))

  def visit_Attribute(self, node):
    if isinstance(node.value, cst.Name):
      self.other.setdefault(node.value.value, []).append(node)


def find(body, resolver, local_refs):
  """``{name: (partial Ref, [partial value nodes], call node, [attr uses])}``.

  Only locals that ``local_refs`` (the body's resolved locals) left
  unresolved, assigned ``X.partial(...)`` at least once and otherwise
  something unknown (a parameter / field holding a module), and called
  exactly once outside loops and nested functions.
  """
  scan = _Scan(resolver)
  body.visit(scan)
  out = {}
  for name, assigns in scan.assigns.items():
    if name in local_refs:
      continue
    partials = [(v, r) for v, r in assigns
                if r is not None and r.kind == 'partial']
    others = [(v, r) for v, r in assigns if r is None or r.kind != 'partial']
    if not partials or not others or any(
        v is None or r is not None for v, r in others):
      continue
    inner = {(r.target.kind, id(r.target.target)) for _, r in partials}
    if len(inner) != 1:
      continue
    calls = scan.calls.get(name, [])
    if len(calls) != 1 or calls[0][1]:
      continue
    uses = [a for a in scan.other.get(name, [])]
    out[name] = (partials[0][1], [v for v, _ in partials], calls[0][0], uses)
  return out


def legacy_name(events, call_node, type_name):
  """The legacy auto-name of ``call_node`` from the name planner's events.

  None when the plan cannot tell (no event, or several: a loop).
  """
  index = [i for i, e in enumerate(events) if e[0] == id(call_node)]
  if len(index) != 1 or type_name is None:
    return None
  same_type = [e for e in events if e[1] == type_name]
  if len(same_type) != 1:
    return None  # other auto-named modules of the type: keep it simple
  return f'{type_name}_{index[0]}'


ATTR_TODO = ('{name}.{attr}: legacy called a module method of a .partial as '
             'a module of its own (auto-named after the method); the linen '
             'instance shares its parameters: check the parameter tree')
