"""Removed ``jax.test_util`` test helpers -> absl + NumPy.

JAX made its test infrastructure private (jax 0.3.8); only ``check_grads``,
``check_jvp`` and ``check_vjp`` stay public in ``jax.test_util``.  Legacy
test files subclassed ``jtu.JaxTestCase`` and called its assertions.  This
pass (run on each file after the other rules) rewrites:

* a class base ``jtu.JaxTestCase`` (or ``JaxTestCase`` imported from
  ``jax.test_util``, or spelled ``jax.test_util.JaxTestCase``) ->
  ``parameterized.TestCase`` from ``absl.testing`` (JaxTestCase was one, so
  ``@parameterized`` tests keep working);
* ``self.assertAllClose(x, y, ...)`` (and ``self.assertArraysAllClose(x,
  y, ...)``, its check of two arrays: the same keywords, the same leaf
  check) in such a class (or a subclass of one in the same file) ->
  ``_assert_all_close(x, y, ...)``, a function the
  pass writes once into the file: same tree structure, shapes, dtypes when
  ``check_dtypes`` (canonicalized as JAX stores them), and
  ``numpy.testing.assert_allclose`` per leaf with atol = rtol = JAX's old
  per-dtype default when not given (float32 1e-6, float64 1e-15, float16
  1e-3, bfloat16 1e-2, complex64 1e-6, complex128 1e-15, exact otherwise);
* the ``jax.test_util`` import, once nothing uses it any more.

Left with a TODO: other JaxTestCase-only methods (``self.rng()``,
``assertArraysEqual``, ``_CompileAndCheck`` ...) and removed
``jtu.<name>`` helpers (``check_eq``, ``rand_*`` ...).
"""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import positions as positions_lib
from flaxlegacy.upgrade import walk
from flaxlegacy.upgrade.rules import jax_names

MODULE = 'jax.test_util'
STILL_PUBLIC = frozenset(('check_grads', 'check_jvp', 'check_vjp'))
JAX_TEST_CASE_ONLY = frozenset((
    'rng', 'assertArraysEqual', 'assertDtypesMatch',
    'assertMultiLineStrippedEqual', '_CompileAndCheck', '_CheckAgainstNumpy',
    'assertAllCloseToleranceDict'))
HELPER = '_assert_all_close'
HELPER_SRC = '''

# Written by flaxlegacy upgrade for the removed jax.test_util.JaxTestCase.
def _assert_all_close(x, y, check_dtypes=True, atol=None, rtol=None,
                      canonicalize_dtypes=True, err_msg=''):
  """The check of the removed jax.test_util.JaxTestCase.assertAllClose.

  The same tree structure and shapes, the same dtypes if check_dtypes, and
  numpy.testing.assert_allclose per leaf with atol = rtol = JAX's old
  per-dtype default where not given.
  """
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  default = {'bfloat16': 1e-2, 'float16': 1e-3, 'float32': 1e-6,
             'float64': 1e-15, 'complex64': 1e-6, 'complex128': 1e-15}
  xs, x_tree = jax.tree_util.tree_flatten(x)
  ys, y_tree = jax.tree_util.tree_flatten(y)
  assert x_tree == y_tree, f'tree structures differ: {x_tree} vs {y_tree}'
  for a, b in zip(xs, ys):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, f'shapes differ: {a.shape} vs {b.shape}'
    if check_dtypes:
      canon = (jax.dtypes.canonicalize_dtype if canonicalize_dtypes
               else np.dtype)
      assert canon(a.dtype) == canon(b.dtype), (
          f'dtypes differ: {a.dtype} vs {b.dtype}')
    tol = max(default.get(a.dtype.name, 0.0), default.get(b.dtype.name, 0.0))
    if a.dtype.name == 'bfloat16':
      a = a.astype(np.float32)
    if b.dtype.name == 'bfloat16':
      b = b.astype(np.float32)
    np.testing.assert_allclose(a, b, atol=tol if atol is None else atol,
                               rtol=tol if rtol is None else rtol,
                               err_msg=err_msg)
'''


def _local_names(imports):
  """(locals bound to jax.test_util, locals bound to its JaxTestCase)."""
  mods = {k for k, v in imports.items() if v == MODULE}
  cases = {k for k, v in imports.items() if v == MODULE + '.JaxTestCase'}
  return mods, cases


class _Pass(cst_util.TodoComments, walk.FastTransformer):
  """The rewrite; TODO comments attach to the enclosing statement."""

  def __init__(self, ctx, mods, cases, positions):
    super().__init__()
    self.ctx = ctx
    self.mods = mods
    self.cases = cases
    self.positions = positions
    self.converted = set()  # class names whose base was JaxTestCase
    self.class_stack = []  # True per open class that was converted
    self.used_helper = False
    self.need_parameterized = False
    self._todos = []
    self._in_import = 0

  def _line(self, node):
    pos = self.positions.get(node)
    return pos.start.line if pos is not None else None

  def rewrote(self, node, what):
    self.ctx.report.rewritten.append(
        {'rule': 'test_util', 'line': self._line(node), 'what': what})

  _line_of = _line

  def _is_case(self, expr):
    name = cst_util.dotted(expr)
    if name is None:
      return False
    if name in self.cases or name == MODULE + '.JaxTestCase':
      return True
    head, _, attr = name.rpartition('.')
    return attr == 'JaxTestCase' and head in self.mods

  def visit_Import(self, node):
    self._in_import += 1

  def visit_ImportFrom(self, node):
    self._in_import += 1

  def leave_Import(self, original_node, updated_node):
    self._in_import -= 1
    return updated_node

  def leave_ImportFrom(self, original_node, updated_node):
    self._in_import -= 1
    return updated_node

  def visit_ClassDef(self, node):
    conv = any(self._is_case(b.value) or (
        isinstance(b.value, cst.Name) and b.value.value in self.converted)
               for b in node.bases)
    if conv:
      self.converted.add(node.name.value)
    self.class_stack.append(conv)

  def leave_ClassDef(self, original_node, updated_node):
    self.class_stack.pop()
    bases = []
    for b, ob in zip(updated_node.bases, original_node.bases):
      if self._is_case(ob.value):
        self.need_parameterized = True
        self.rewrote(ob, 'jax.test_util.JaxTestCase -> parameterized.TestCase')
        b = b.with_changes(value=cst_util.expr('parameterized.TestCase'))
      bases.append(b)
    return updated_node.with_changes(bases=bases)

  def leave_Call(self, original_node, updated_node):
    f = original_node.func
    if not (self.class_stack and self.class_stack[-1]
            and isinstance(f, cst.Attribute)
            and isinstance(f.value, cst.Name) and f.value.value == 'self'):
      return updated_node
    if f.attr.value in ('assertAllClose', 'assertArraysAllClose'):
      self.used_helper = True
      self.rewrote(original_node, f'self.{f.attr.value} -> '
                   f'{HELPER} (numpy.testing)')
      return updated_node.with_changes(func=cst.Name(HELPER))
    if f.attr.value in JAX_TEST_CASE_ONLY:
      self.todo(original_node, f'self.{f.attr.value} came from the removed '
                'jax.test_util.JaxTestCase: write it with numpy / '
                'numpy.testing')
    return updated_node

  def leave_Attribute(self, original_node, updated_node):
    if self._in_import:
      return updated_node
    name = cst_util.dotted(original_node)
    if name is None:
      return updated_node
    head, _, attr = name.rpartition('.')
    full = f'{MODULE}.{attr}'
    if (head in self.mods or head == MODULE) and attr not in STILL_PUBLIC and (
        attr != 'JaxTestCase') and full not in jax_names.UNSURE and (
            full not in jax_names.RENAMES) and full not in jax_names.CALLS:
      self.todo(original_node, f'jax.test_util.{attr} was removed from JAX '
                '(its test helpers are private now): write it with numpy / '
                'numpy.testing')
    return updated_node


class _Uses(walk.FastVisitor):
  """Names used outside import statements."""

  def __init__(self):
    self.names = set()

  def visit_Import(self, node):
    return False

  def visit_ImportFrom(self, node):
    return False

  def visit_Name(self, node):
    self.names.add(node.value)


def _drop_imports(module, unused):
  """Removes the import aliases bound to names in ``unused``."""

  class T(walk.FastTransformer):

    def _keep(self, alias, from_test_util):
      local = (alias.asname.name.value if alias.asname
               else cst_util.dotted(alias.name))
      return not (local in unused and from_test_util)

    def leave_ImportFrom(self, original_node, updated_node):
      if isinstance(updated_node.names, cst.ImportStar) or (
          updated_node.module is None):
        return updated_node
      mod = cst_util.dotted(updated_node.module)
      names = [a for a in updated_node.names
               if self._keep(a, f'{mod}.{cst_util.dotted(a.name)}'.startswith(
                   MODULE))]
      if not names:
        return cst.RemoveFromParent()
      if len(names) != len(updated_node.names):
        names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated_node.with_changes(names=names)
      return updated_node

    def leave_Import(self, original_node, updated_node):
      names = [a for a in updated_node.names
               if self._keep(a, cst_util.dotted(a.name) == MODULE)]
      if not names:
        return cst.RemoveFromParent()
      if len(names) != len(updated_node.names):
        names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated_node.with_changes(names=names)
      return updated_node

  return T().walk(module)


def _insert_helper(module):
  """``_assert_all_close`` after the last top-level import."""
  body = list(module.body)
  last = -1
  for i, stmt in enumerate(body):
    if isinstance(stmt, cst.SimpleStatementLine) and any(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body):
      last = i
  helper = cst.parse_module(HELPER_SRC).body[0]
  helper = helper.with_changes(leading_lines=[cst.EmptyLine(indent=False)] * 2
                               + [l for l in helper.leading_lines
                                  if l.comment is not None])
  body[last + 1:last + 1] = [helper]
  return module.with_changes(body=body)


def _defines(module, name):
  return any(isinstance(s, cst.FunctionDef) and s.name.value == name
             for s in module.body)


def run(ctx, module):
  """The pass over one (already upgraded) module; returns the new module."""
  mods, cases = _local_names(ctx.facts.imports)
  if not mods and not cases:
    return module
  pas = _Pass(ctx, mods, cases, positions_lib.LazyPositions(module))
  new = pas.walk(module)
  if pas.used_helper and _defines(new, HELPER):
    pas.ctx.report.left.append({'line': None, 'why': f'{HELPER} is already '
                                'defined in this file: check it is the '
                                'upgrade\'s'})
  uses = _Uses()
  new.visit(uses)
  unused = (mods | cases) - uses.names
  if unused:
    new = _drop_imports(new, unused)
  if pas.used_helper and not _defines(new, HELPER):
    new = _insert_helper(new)
  if pas.need_parameterized:
    new = cst_util.add_imports(new, {'absl.testing.parameterized'})
  return new
