"""Rule: FrozenDict methods on linen variables -> the ``flax.core`` functions.

flax 0.3 linen returned FrozenDicts from ``init`` and ``apply(...,
mutable=...)``; today's returns dicts, which have no ``unfreeze`` and whose
``pop`` returns the value alone.  The ``flax.core`` functions take both and
return what the FrozenDict methods returned:

* ``x.unfreeze()`` -> ``flax.core.unfreeze(x)``
* ``rest, value = x.pop('k')`` -> ``rest, value = flax.core.pop(x, 'k')``
  where ``x`` is known to hold variables: the result of an ``init`` call
  (``m.init(...)``, ``nn.init(fn, m)(...)``, ``jax.jit(m.init)(...)``) or
  a name whose every binding in its scope is one (also the second of
  ``_, x = m.init_with_output(...)`` / ``y, x = m.apply(..., mutable=...)``
  and the rest of such a ``pop``).  Unpacked into two names but not known
  (a parameter, an attribute): a TODO where the key is a linen
  collection's name (``'params'``) or computed, and the value is not a
  dict display.  A dict's
  own ``pop`` (not unpacked into two names) is left alone.
* ``x.copy({...})`` / ``x.copy(add_or_replace=...)`` -> ``flax.core.copy(x,
  ...)`` (a dict's ``copy`` takes no argument)
* ``x.pretty_repr()`` -> ``flax.core.pretty_repr(x)``

Only in files that import flax; in files that import only JAX (a test
that gets its model from a codebase module), only ``pop`` (``pop_only``).
"""

import libcst as cst

from flaxlegacy.upgrade import walk
from flaxlegacy.upgrade.rules.early_linen import _common

_METHODS = ('unfreeze', 'pop', 'copy', 'pretty_repr')
# linen's collections: a key that says a popped value may be variables
COLLECTIONS = ('params', 'batch_stats', 'cache', 'intermediates', 'state',
               'param_axes', 'losses', 'constants')
POP_WHY = ('x.pop(k) unpacked into two names: flax 0.3\'s FrozenDict.pop '
           'returned (rest, value), a dict\'s pop returns the value; the '
           'upgrade cannot tell which x holds (if linen variables: '
           'flax.core.pop(x, k))')


def relevant(code, names):  # pylint: disable=unused-argument
  return any(f'.{m}(' in code for m in _METHODS)


def _pair_pop(node):
  """The ``.pop(k)`` call of ``a, b = x.pop(k)`` (one positional key)."""
  if not (isinstance(node, cst.Assign) and len(node.targets) == 1 and
          isinstance(node.targets[0].target, (cst.Tuple, cst.List)) and
          len(node.targets[0].target.elements) == 2 and
          isinstance(node.value, cst.Call)):
    return None
  call = node.value
  if not (isinstance(call.func, cst.Attribute) and
          call.func.attr.value == 'pop' and len(call.args) == 1 and
          call.args[0].keyword is None and not call.args[0].star):
    return None
  return call


def _mutable(call):
  """Does ``m.apply(...)`` return (output, variables): mutable= not False."""
  for a in call.args:
    if a.keyword is not None and a.keyword.value == 'mutable':
      return not (isinstance(a.value, cst.Name) and
                  a.value.value in ('False', 'None'))
  return False


class _Bindings(walk.FastVisitor):
  """Every binding of a name in one scope (not in nested functions,
  lambdas or classes): name -> list of (kind, node, blocks, loops), with
  the ids of the indented blocks and loops that hold it."""

  def __init__(self):
    self.found = {}
    self.blocks = []
    self.loops = []

  def _add(self, target, kind, node):
    where = (tuple(self.blocks), frozenset(self.loops))
    if isinstance(target, cst.Name):
      self.found.setdefault(target.value, []).append((kind, node) + where)
    elif isinstance(target, (cst.Tuple, cst.List)):
      for i, el in enumerate(target.elements):
        inner = el.value
        if isinstance(inner, cst.Name) and kind == 'assign' and len(
            target.elements) == 2:
          self.found.setdefault(inner.value, []).append(
              (('pair', i), node) + where)
        else:
          self._add(inner, 'other', node)
    elif isinstance(target, cst.StarredElement):
      self._add(target.value, 'other', node)

  def visit_IndentedBlock(self, node):
    self.blocks.append(id(node))
    return True

  def leave_IndentedBlock(self, original_node):
    self.blocks.pop()

  def visit_FunctionDef(self, node):
    self._add(node.name, 'other', node)
    return False

  def visit_ClassDef(self, node):
    self._add(node.name, 'other', node)
    return False

  def visit_Lambda(self, node):
    return False

  def visit_Assign(self, node):
    for t in node.targets:
      self._add(t.target, 'assign', node)
    return True

  def visit_AnnAssign(self, node):
    self._add(node.target, 'other', node)
    return True

  def visit_AugAssign(self, node):
    self._add(node.target, 'other', node)
    return True

  def visit_For(self, node):
    self.loops.append(id(node))
    self._add(node.target, 'other', node)
    return True

  def leave_For(self, original_node):
    self.loops.pop()

  def visit_While(self, node):
    self.loops.append(id(node))
    return True

  def leave_While(self, original_node):
    self.loops.pop()

  def visit_CompFor(self, node):
    self._add(node.target, 'other', node)
    return True

  def visit_AsName(self, node):
    self._add(node.name, 'other', node)
    return True

  def visit_NamedExpr(self, node):
    self._add(node.target, 'other', node)
    return True

  def visit_Param(self, node):
    self._add(node.name, 'other', node)
    return False

  def visit_Global(self, node):
    for n in node.names:
      self._add(n.name, 'other', node)
    return False

  def visit_Nonlocal(self, node):
    for n in node.names:
      self._add(n.name, 'other', node)
    return False


class Rule(_common.Rule):
  NAME = 'early_linen_frozendict'

  def __init__(self, names, report, needed, pop_only=False):
    super().__init__(names, report, needed)
    self._pairs = set()  # ids of .pop calls unpacked into two names
    self._scopes = []  # per open scope: its bindings, open blocks and loops
    self.pop_only = pop_only  # a file importing only JAX

  # -- what holds variables: the binding that reaches the use --
  # A name holds variables at a use where the last binding before it (in
  # the scope, by line) holds them and is in a block that holds the use
  # (not a branch the use is outside of), and no binding later in a loop
  # holding the use reaches it on the next iteration.
  def _open_scope(self, node, params=None):
    b = _Bindings()
    if params is not None:
      params.visit(b)
    body = node.body  # a module's statements, or a function's suite
    for stmt in (body if isinstance(body, (list, tuple)) else body.body):
      stmt.visit(b)
    self._scopes.append({'bindings': b.found, 'blocks': [], 'loops': [],
                         'own': id(body)})

  def visit_Module(self, node):
    self._open_scope(node)
    return True

  def leave_Module(self, original_node, updated_node):
    self._scopes.pop()
    return updated_node

  def visit_FunctionDef(self, node):
    self._open_scope(node, node.params)
    return True

  def leave_FunctionDef(self, original_node, updated_node):
    self._scopes.pop()
    return updated_node

  def visit_IndentedBlock(self, node):
    if self._scopes and id(node) != self._scopes[-1]['own']:
      self._scopes[-1]['blocks'].append(id(node))
    return True

  def leave_IndentedBlock(self, original_node, updated_node):
    if self._scopes and id(original_node) != self._scopes[-1]['own']:
      self._scopes[-1]['blocks'].pop()
    return updated_node

  def visit_For(self, node):
    if self._scopes:
      self._scopes[-1]['loops'].append(id(node))
    return True

  def leave_For(self, original_node, updated_node):
    if self._scopes:
      self._scopes[-1]['loops'].pop()
    return updated_node

  visit_While = visit_For
  leave_While = leave_For

  def _init_call(self, expr):
    """Is ``expr`` a call that returns linen variables (an init)?"""
    if not isinstance(expr, cst.Call):
      return False
    f = expr.func
    if isinstance(f, cst.Attribute) and f.attr.value == 'init':
      return True
    if isinstance(f, cst.Call):  # nn.init(fn, m)(...) / jax.jit(m.init)(...)
      q = self.names.qualify(f.func)
      if q in ('flax.linen.init', 'flax.linen.transforms.init',
               'flax.core.init'):
        return True
      if q in ('jax.jit', 'jax.pmap') and f.args and f.args[0].keyword is None:
        inner = f.args[0].value
        return isinstance(inner, cst.Attribute) and inner.attr.value == 'init'
    return False

  def _known_name(self, name, line, blocks, depth):
    if not self._scopes or depth > 8 or line is None:
      return False
    scope = self._scopes[-1]
    bindings = scope['bindings'].get(name) or []
    loops = set(scope['loops'])
    before = []
    for kind, node, b_blocks, b_loops in bindings:
      b_line = self.line(node)
      if b_line is None:
        return False
      if b_line >= line:
        if b_loops & loops:
          return False  # rebound later in a loop holding the use
        continue
      before.append((b_line, kind, node, b_blocks))
    if not before:
      return False
    _, kind, node, b_blocks = max(before, key=lambda t: t[0])
    if tuple(blocks[:len(b_blocks)]) != b_blocks:
      return False  # in a branch that does not hold the use
    return self._known_binding(kind, node, b_blocks, depth)

  def _known_binding(self, kind, node, blocks, depth):
    if kind == 'other':
      return False
    value = node.value
    line = self.line(node)
    if kind == 'assign':
      return self._holds_variables(value, line, blocks, depth + 1)
    if isinstance(kind, tuple) and kind[0] == 'pair':
      i = kind[1]
      if not isinstance(value, cst.Call):
        return False
      f = value.func
      if i == 1 and isinstance(f, cst.Attribute) and (
          f.attr.value == 'init_with_output' or
          (f.attr.value == 'apply' and _mutable(value))):
        return True
      pop = _pair_pop(node)
      if i == 0 and pop is not None:  # rest, value = <variables>.pop(k)
        return self._holds_variables(pop.func.value, line, blocks, depth + 1)
    return False

  def _holds_variables(self, expr, line, blocks, depth=0):
    if self._init_call(expr):
      return True
    if isinstance(expr, cst.Name):
      return self._known_name(expr.value, line, blocks, depth)
    return False

  # -- the rewrites --
  def visit_Assign(self, node):
    pop = _pair_pop(node)
    if pop is not None:
      self._pairs.add(id(pop))
    return True

  def _function(self, name, receiver, args, node, what):
    func = self.names.spell(f'flax.core.{name}', self.needed)
    self.rewrote(node, what)
    return cst.Call(func=_common.e(func), args=_common.clean_args(
        [cst.Arg(value=receiver)] + list(args)))

  @staticmethod
  def _may_be_variables(receiver, key):
    """A pop that may be of variables: not of a dict display / ``dict()``,
    with a linen collection's name or a computed key."""
    if isinstance(receiver, (cst.Dict, cst.DictComp)) or (
        isinstance(receiver, cst.Call) and
        isinstance(receiver.func, cst.Name) and receiver.func.value == 'dict'):
      return False
    if isinstance(key, (cst.SimpleString, cst.ConcatenatedString)):
      return key.evaluated_value in COLLECTIONS
    return not isinstance(key, (cst.Integer, cst.Float, cst.FormattedString))

  def leave_Call(self, original_node, updated_node):
    f = original_node.func
    if not isinstance(f, cst.Attribute):
      return updated_node
    method = f.attr.value
    receiver = updated_node.func.value
    args = list(updated_node.args)
    if method == 'pop' and id(original_node) in self._pairs:
      scope = self._scopes[-1] if self._scopes else {'blocks': []}
      if self._holds_variables(f.value, self.line(original_node),
                               tuple(scope['blocks'])):
        return self._function('pop', receiver, args, original_node,
                              'rest, value = x.pop(k) -> flax.core.pop(x, k)')
      if self._may_be_variables(f.value, args[0].value):
        self.todo(original_node, POP_WHY)
      return updated_node
    if self.pop_only:
      return updated_node
    if method == 'unfreeze' and not args:
      return self._function('unfreeze', receiver, [], original_node,
                            'x.unfreeze() -> flax.core.unfreeze(x)')
    if method == 'pretty_repr' and not args:
      return self._function('pretty_repr', receiver, [], original_node,
                            'x.pretty_repr() -> flax.core.pretty_repr(x)')
    if method == 'copy' and (
        (len(args) == 1 and args[0].keyword is None and
         isinstance(args[0].value, cst.Dict)) or
        (len(args) == 1 and args[0].keyword is not None and
         args[0].keyword.value == 'add_or_replace')):
      return self._function('copy', receiver, args, original_node,
                            'x.copy(add_or_replace) -> flax.core.copy(x, ...)')
    return updated_node
