"""Rule: dict lookups by elements of an iterated array (a JAX change).

Iterating a 2020 ``DeviceArray`` yielded NumPy scalars; iterating a
``jax.Array`` yields 0-d arrays, which are unhashable, so code such as::

    for elem in inputs:
      chars.append(self._indices_char[elem])

raises ``TypeError: unhashable type`` when ``inputs`` is a JAX array.  In a
method whose class assigns ``self.<attr>`` only dicts (``{...}``,
``dict(...)``, a dict comprehension), a lookup ``self.<attr>[v]`` by the
target ``v`` of an enclosing ``for`` loop becomes
``self.<attr>[legacy_rng.hashable(v)]`` (``flaxlegacy.migrate.upgraded``):
a 0-d array becomes the NumPy scalar legacy gave, anything else passes
unchanged, so the rewrite changes only lookups that would raise.
Loops over ``range``/``enumerate``/``zip``/``.items()``/... are left alone
(they never yield arrays).
"""

import re

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import positions as positions_lib
from flaxlegacy.upgrade import walk

HELPER = 'legacy_rng.hashable'
IMPORT = 'from flaxlegacy.migrate import upgraded as legacy_rng'
PLAIN_ITERS = frozenset(('range', 'enumerate', 'zip', 'sorted', 'reversed',
                         'items', 'keys', 'values', 'split', 'splitlines'))
_MARK = re.compile(r'self\.\w+\s*=\s*(dict\(|\{)')


def _is_dict(value):
  return (isinstance(value, (cst.Dict, cst.DictComp))
          or isinstance(value, cst.Call) and isinstance(value.func, cst.Name)
          and value.func.value == 'dict')


def _self_attr(node):
  if (isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name)
      and node.value.value == 'self'):
    return node.attr.value
  return None


def _dict_attrs(cls):
  dicts, others = set(), set()

  class V(walk.FastVisitor):

    def visit_Assign(self, node):
      for t in node.targets:
        a = _self_attr(t.target)
        if a:
          (dicts if _is_dict(node.value) else others).add(a)

    def visit_AugAssign(self, node):
      a = _self_attr(node.target)
      if a:
        others.add(a)

    def visit_AnnAssign(self, node):
      a = _self_attr(node.target)
      if a:
        (dicts if node.value is not None and _is_dict(node.value)
         else others).add(a)

  cls.visit(V())
  return dicts - others


def _plain_iter(it):
  if isinstance(it, cst.Call):
    f = it.func
    name = f.value if isinstance(f, cst.Name) else (
        f.attr.value if isinstance(f, cst.Attribute) else None)
    return name in PLAIN_ITERS
  return isinstance(it, (cst.SimpleString, cst.FormattedString,
                         cst.ConcatenatedString, cst.Dict, cst.Set))


class _Rewriter(walk.FastTransformer):
  def __init__(self, report, positions):
    super().__init__()
    self.report = report
    self.positions = positions
    self.dicts = []  # stack per class
    self.loop_vars = []  # stack of loop target names
    self.changed = False

  def visit_ClassDef(self, node):
    self.dicts.append(_dict_attrs(node))

  def leave_ClassDef(self, original_node, updated_node):
    self.dicts.pop()
    return updated_node

  def visit_For(self, node):
    t = node.target
    ok = isinstance(t, cst.Name) and not _plain_iter(node.iter)
    self.loop_vars.append(t.value if ok else None)

  def leave_For(self, original_node, updated_node):
    self.loop_vars.pop()
    return updated_node

  def leave_Subscript(self, original_node, updated_node):
    if not self.dicts or not self.dicts[-1]:
      return updated_node
    attr = _self_attr(original_node.value)
    if attr not in self.dicts[-1] or len(original_node.slice) != 1:
      return updated_node
    idx = original_node.slice[0].slice
    if not (isinstance(idx, cst.Index) and isinstance(idx.value, cst.Name)
            and idx.value.value in self.loop_vars):
      return updated_node
    self.changed = True
    pos = self.positions.get(original_node)
    self.report.rewritten.append({
        'rule': 'array_keys', 'line': pos.start.line if pos else None,
        'what': f'self.{attr}[{idx.value.value}]: dict key from an iterated '
                'array -> legacy_rng.hashable'})
    new_idx = idx.with_changes(value=cst_util.expr(
        f'{HELPER}({idx.value.value})'))
    return updated_node.with_changes(slice=[
        updated_node.slice[0].with_changes(slice=new_idx)])


def run(file_facts, report, module, code=None):
  """The module with the lookups rewritten (the same object if none);
  ``code``: the module's source, where the caller has it."""
  if not any(v.split('.')[0] == 'jax' for v in file_facts.imports.values()):
    return module
  code = cst_util.code(module) if code is None else code
  if not _MARK.search(code) or 'for ' not in code:
    return module
  rw = _Rewriter(report, positions_lib.LazyPositions(module))
  new = rw.walk(module)
  if not rw.changed:
    return module
  if IMPORT not in new.code:
    new = cst_util.add_import_lines(new, {IMPORT}, set())
  return new
