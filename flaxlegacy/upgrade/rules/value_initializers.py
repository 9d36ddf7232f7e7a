"""Rule: initializers that compute in Python on array values (a linen change).

Legacy ``Module.call(params, ...)`` and ``Model(...)`` never ran a
parameter's initializer once the parameter existed.  Linen does: on every
``apply``, ``Module.param`` runs the initializer under ``jax.eval_shape``
to check the stored parameter's shape against it.  Under ``eval_shape``
every ``jnp`` result is abstract, so an initializer that branches in
Python on array values (``if jnp.sum(mask) == 0:``), converts them
(``int(counts[i])``) or sizes a result by them fails there with a
``TracerBoolConversionError`` / ``ConcretizationTypeError``, although it
ran under legacy Flax.

No rewrite makes such code shape-pure in general, so this rule only finds
it and says so: in a function with the initializer signature (a first
parameter named like a PRNG key, ``rng`` / ``key`` / ``prng_key`` ..., then
``shape``), the first statement whose test (``if`` / ``while`` /
``assert``, a conditional expression) or ``int()`` / ``float()`` /
``bool()`` call reads an array value gets a TODO.  An array value is the
result of a ``jnp`` / ``jax`` call, or a name the function assigned from
one; its ``.shape`` / ``.ndim`` / ``.dtype`` / ``.size`` and ``len()`` are
static and do not count, nor do the function's parameters (``if mask is
None:`` is Python).
"""

import re

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import positions as positions_lib
from flaxlegacy.upgrade import walk

WHY = ('linen runs a parameter\'s initializer under jax.eval_shape on every '
       'apply, to check the stored shape (legacy Module.call never ran it); '
       'this initializer computes in Python on array values, which fails '
       'there (TracerBoolConversionError / ConcretizationTypeError): make it '
       'shape-pure (jnp.where, lax.cond, sizes from shapes) for linen')
_KEY = re.compile(r'(^|_)(rng|key|prng|rngs|prng_key|rng_key|seed)($|_)')
_MARK = re.compile(r'def\s+\w+\(\s*\w*(rng|key)\w*\s*,\s*shape\b')
_STATIC_ATTRS = frozenset(('shape', 'ndim', 'dtype', 'size'))
_CONVERSIONS = frozenset(('int', 'float', 'bool'))


def is_initializer(fn):
  """Whether ``fn`` (a FunctionDef) has the initializer signature."""
  params = [p.name.value for p in fn.params.params]
  return (len(params) >= 2 and bool(_KEY.search(params[0]))
          and params[1] == 'shape')


def _array_modules(module):
  """Local names bound to ``jax`` / ``jax.numpy`` / ``jax.random`` ..."""
  names = set()
  for stmt in module.body:
    if not isinstance(stmt, cst.SimpleStatementLine):
      continue
    for small in stmt.body:
      if isinstance(small, cst.Import):
        for a in small.names:
          dotted = cst_util.dotted(a.name)
          if dotted == 'jax' or dotted.startswith('jax.'):
            names.add(a.asname.name.value if a.asname else
                      dotted.split('.')[0])
      elif isinstance(small, cst.ImportFrom) and small.module is not None:
        base = cst_util.dotted(small.module)
        if (base == 'jax' or base.startswith('jax.')) and not isinstance(
            small.names, cst.ImportStar):
          for a in small.names:
            if a.name.value in ('numpy', 'random', 'lax', 'nn', 'scipy'):
              names.add(a.asname.name.value if a.asname else a.name.value)
  return names


class _Reads(cst.CSTVisitor):
  """Whether an expression reads an array value."""

  def __init__(self, arrays, modules):
    super().__init__()
    self.arrays, self.modules = arrays, modules
    self.found = False

  def visit_Attribute(self, node):
    if node.attr.value in _STATIC_ATTRS:
      return False  # x.shape: static, whatever x is
    return True

  def visit_Call(self, node):
    f = node.func
    if isinstance(f, cst.Name) and f.value == 'len':
      return False
    root = f
    while isinstance(root, cst.Attribute):
      root = root.value
    if (isinstance(f, cst.Attribute) and isinstance(root, cst.Name)
        and root.value in self.modules):
      self.found = True
      return False
    return True

  def visit_Name(self, node):
    if node.value in self.arrays:
      self.found = True

  def visit_Lambda(self, node):
    return False


def _reads_arrays(expr, arrays, modules):
  v = _Reads(arrays, modules)
  expr.visit(v)
  return v.found


class _FirstUse(cst.CSTVisitor):
  """The first statement of an initializer that reads array values where
  Python needs a concrete value; walks in source order, tracking names
  assigned from array values."""

  def __init__(self, modules):
    super().__init__()
    self.modules = modules
    self.arrays = set()
    self.stmts = []  # enclosing statements
    self.found = None

  def on_visit(self, node):
    if self.found is not None:
      return False
    if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)) and (
        self.stmts):
      return False  # nested definitions run elsewhere
    if isinstance(node, cst.BaseStatement):
      self.stmts.append(node)
    return super().on_visit(node)

  def on_leave(self, original_node):
    if isinstance(original_node, cst.BaseStatement) and self.stmts and (
        self.stmts[-1] is original_node):
      self.stmts.pop()
    super().on_leave(original_node)

  def _hit(self, expr):
    if self.found is None and _reads_arrays(expr, self.arrays, self.modules):
      self.found = self.stmts[-1]

  def visit_If(self, node):
    self._hit(node.test)

  def visit_While(self, node):
    self._hit(node.test)

  def visit_Assert(self, node):
    self._hit(node.test)

  def visit_IfExp(self, node):
    self._hit(node.test)

  def visit_Call(self, node):
    if (isinstance(node.func, cst.Name) and node.func.value in _CONVERSIONS
        and node.args):
      self._hit(node.args[0].value)

  def _assign(self, targets, value):
    names = [n for t in targets for n in walk.target_names(t)]
    if value is not None and _reads_arrays(value, self.arrays, self.modules):
      self.arrays.update(names)
    else:
      self.arrays.difference_update(names)

  def leave_Assign(self, node):
    self._assign([t.target for t in node.targets], node.value)

  def leave_AnnAssign(self, node):
    self._assign([node.target], node.value)

  def leave_AugAssign(self, node):
    if _reads_arrays(node.value, self.arrays, self.modules):
      self.arrays.update(walk.target_names(node.target))


class _Rewriter(walk.FastTransformer):

  def __init__(self, report, positions, modules):
    super().__init__()
    self.report, self.positions, self.modules = report, positions, modules
    self.marked = {}  # statement -> True, found per initializer

  def visit_FunctionDef(self, node):
    if is_initializer(node):
      v = _FirstUse(self.modules)
      node.body.visit(v)
      if v.found is not None:
        self.marked[v.found] = node.name.value

  def on_leave(self, original_node, updated_node):
    updated = super().on_leave(original_node, updated_node)
    name = self.marked.get(original_node)
    if name is None or not isinstance(updated, cst.BaseStatement):
      return updated
    text = cst_util.TODO_PREFIX + WHY
    if any(l.comment is not None and l.comment.value == text
           for l in updated.leading_lines):
      return updated  # upgraded before: neither the TODO nor its report
    pos = self.positions.get(original_node)
    self.report.left.append({'line': pos.start.line if pos else None,
                             'why': f'{name}: {WHY}'})
    return cst_util.add_todos(updated, [WHY])


def run(report, module, code=None):
  """The module with a TODO above each such statement (the same object if
  there is none); ``code``: the module's source, where the caller has it."""
  code = cst_util.code(module) if code is None else code
  if not _MARK.search(code):
    return module
  modules = _array_modules(module)
  if not modules:
    return module
  rw = _Rewriter(report, positions_lib.LazyPositions(module), modules)
  new = rw.walk(module)
  return module if not rw.marked else new
