"""A read-only libcst walk that does not rebuild the tree (speed).

``node.visit(visitor)`` with a ``cst.CSTVisitor`` walks through each
node's ``_visit_and_replace_children``: it constructs (and validates) a
new copy of every node it passes, and throws the copies away.  That is
most of the cost of the facts walks.  ``FastVisitor`` is a drop-in base
class: the same ``visit_X`` / ``leave_X`` calls, on the same nodes, in
the same order, without the copies.

The order of a node's children is the order in which its class's
``_visit_and_replace_children`` visits its fields, read once per class
from libcst's source (every such method visits ``self.<field>`` with
``visit_required`` / ``visit_optional`` / ``visit_sentinel`` /
``visit_sequence`` / ``visit_body_sequence``; a field holding a node is
visited as one, a sequence child by child).  What it leaves out: the
``visit_<Node>_<field>`` attribute hooks (no visitor here defines one;
``FastVisitor`` refuses a subclass that does).  Where libcst's source
cannot be read, that node's children are walked by libcst, as before.
tests/test_upgrade_walk.py checks the calls against libcst's own walk.
"""

import ast
import collections.abc
import inspect
import re
import textwrap

import libcst as cst

_VISITS = frozenset(('visit_required', 'visit_optional', 'visit_sentinel',
                     'visit_sequence', 'visit_body_sequence',
                     'visit_iterable', 'visit_body_iterable'))
_FIELDS = {}  # node class -> its visited fields, in visiting order
_LIBCST_WALKS = set()  # node classes whose source is not there to read
_ATTRIBUTE_HOOK = re.compile(r'^(visit|leave)_[A-Z]\w*?_[a-z]\w*$')


def _fields_of(cls):
  fields = _FIELDS.get(cls)
  if fields is not None:
    return fields
  for klass in cls.__mro__:
    method = klass.__dict__.get('_visit_and_replace_children')
    if method is not None:
      break
  else:
    method = None
  try:
    fn = ast.parse(textwrap.dedent(inspect.getsource(method))).body[0]
  except (OSError, TypeError):  # no source to read: libcst's walk
    _FIELDS[cls] = ()
    _LIBCST_WALKS.add(cls)
    return ()
  calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(
      n.func, ast.Name) and n.func.id in _VISITS]
  calls.sort(key=lambda n: (n.lineno, n.col_offset))
  fields = []
  for call in calls:
    field = call.args[1].value
    if field not in fields:
      fields.append(field)
  fields = tuple(fields)
  _FIELDS[cls] = fields
  return fields


class FastVisitor(cst.CSTVisitor):
  """A ``cst.CSTVisitor`` whose walk copies nothing (see the module
  docstring).  ``node.visit(v)`` works as with any visitor."""

  def __init_subclass__(cls, **kwargs):
    super().__init_subclass__(**kwargs)
    # the hooks the subclasses define (cst.CSTVisitor's own are stubs)
    own = cls.__mro__[:cls.__mro__.index(FastVisitor)]
    hooks = sorted({n for k in own for n in vars(k)
                    if _ATTRIBUTE_HOOK.match(n)})
    if hooks:
      raise TypeError(f'{cls.__name__}: FastVisitor does not call attribute '
                      f'hooks ({", ".join(hooks)}); use cst.CSTVisitor')

  def on_visit(self, node):
    # cst.CSTVisitor.on_visit, with the visit_X look-up cached per class
    key = (type(self), type(node))
    hook = _HOOKS.get(key, _MISSING)
    if hook is _MISSING:
      hook = _HOOKS[key] = getattr(type(self), 'visit_' + type(node).__name__,
                                   None)
    if hook is not None and hook(self, node) is False:
      return False
    fields = _FIELDS.get(type(node))
    if fields is None:
      fields = _fields_of(type(node))
    if type(node) in _LIBCST_WALKS:
      return True
    on_visit, on_leave = self.on_visit, self.on_leave
    for field in fields:
      value = getattr(node, field)
      kind = _KINDS.get(type(value)) or _kind(type(value))
      if kind == _NODE:
        if on_visit(value):  # (as CSTNode.visit does)
          value._visit_and_replace_children(self)  # pylint: disable=protected-access
        on_leave(value)
      elif kind == _SEQUENCE:
        for child in value:
          if on_visit(child):
            child._visit_and_replace_children(self)  # pylint: disable=protected-access
          on_leave(child)
    return False  # the children are walked: libcst goes on to on_leave


_MISSING = object()
_HOOKS = {}  # (visitor class, node class) -> its visit_X or None
_NODE, _SEQUENCE, _NOTHING = 1, 2, 3
_KINDS = {}  # type of a field's value -> _NODE / _SEQUENCE / _NOTHING


def _kind(t):
  """A node, a sequence of nodes, or nothing to walk (None, MaybeSentinel)."""
  if issubclass(t, cst.CSTNode):
    kind = _NODE
  elif issubclass(t, collections.abc.Sequence) and not issubclass(t, str):
    kind = _SEQUENCE
  elif t is type(None) or issubclass(t, cst.MaybeSentinel):
    kind = _NOTHING
  else:
    raise TypeError(f'flaxlegacy upgrade: a libcst field holds a {t.__name__}')
  _KINDS[t] = kind
  return kind


def target_names(t):
  """The names an assignment or loop target binds (``a``, ``a, (b, *c)``)."""
  if isinstance(t, cst.Name):
    return [t.value]
  if isinstance(t, (cst.Tuple, cst.List)):
    return [n for e in t.elements for n in target_names(e.value)]
  if isinstance(t, cst.StarredElement):
    return target_names(t.value)
  return []


class ScopedVisitor(FastVisitor):
  """A ``FastVisitor`` that keeps ``quals``: the names of the classes and
  functions around the node being visited (flow.py's scope names)."""

  def __init__(self):
    self.quals = []

  def visit_ClassDef(self, node):
    self.quals.append(node.name.value)

  def leave_ClassDef(self, node):
    self.quals.pop()

  def visit_FunctionDef(self, node):
    self.quals.append(node.name.value)

  def leave_FunctionDef(self, node):
    self.quals.pop()
