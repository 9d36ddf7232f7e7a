"""Rule: say where flax 0.3's parameter keys are lost.

flax 0.3 linen derived a parameter's key by folding each scope name and the
counter into the key one by one; flax 0.4 and later fold in one hash of
the whole path.  No source change brings the old numbers back, so an
early-linen file (one the other early-linen rules rewrote) that initialises
linen modules (calls ``.init(`` / ``.init_with_output(``) gets one TODO, on
its first import of flax.linen: the same seed gives other initial
parameters (trained parameters and checkpoints carry over unchanged).  In
legacy processes flaxlegacy restores flax 0.3's keys (``linen_keys``).
A file that imports only JAX (a test initialising a codebase's module) and
that the rules rewrote gets it at its first ``init`` call (``jax_only``);
one that only initialises modules of a codebase file importing flax.linen,
in a codebase with a flax 0.3 pattern, at its import of that file
(``linen_locals``: ``keys_across_files``).
"""

import re

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade.rules.early_linen import _common

WHY = ('flax 0.3 linen derived parameter keys differently: on today\'s linen '
       'the same seed initialises other numbers (trained parameters and '
       'checkpoints carry over unchanged)')
_INIT = re.compile(r'\.init(_with_output)?\(')


def relevant(code, names):
  return bool(_INIT.search(code)) and names.imports_module('flax.linen')


class Rule(_common.Rule):
  NAME = 'early_linen_keys'

  def __init__(self, names, report, needed, jax_only=False,
               linen_locals=()):
    super().__init__(names, report, needed)
    self._done = False
    self.jax_only = jax_only
    self.linen_locals = frozenset(linen_locals)

  def _binds_linen_local(self, node):
    if isinstance(node, cst.Import):
      return any((a.asname.name.value if a.asname else
                  (cst_util.dotted(a.name) or '').split('.')[0])
                 in self.linen_locals for a in node.names)
    if isinstance(node, cst.ImportFrom) and not isinstance(
        node.names, cst.ImportStar):
      return any((a.asname.name.value if a.asname else
                  cst_util.dotted(a.name)) in self.linen_locals
                 for a in node.names)
    return False

  def leave_Call(self, original_node, updated_node):
    f = original_node.func
    if (self.jax_only and not self.linen_locals and not self._done and
        isinstance(f, cst.Attribute) and
        f.attr.value in ('init', 'init_with_output')):
      self._done = True
      self.todo(original_node, WHY)
    return updated_node

  def _is_linen_import(self, node):
    if isinstance(node, cst.Import):
      return any((cst_util.dotted(a.name) or '').startswith(
          'flax.linen') for a in node.names)
    if isinstance(node, cst.ImportFrom) and node.module is not None and (
        not node.relative):
      mod = cst_util.dotted(node.module)
      if mod.startswith('flax.linen'):
        return True
      return mod == 'flax' and not isinstance(node.names, cst.ImportStar) and (
          any(cst_util.dotted(a.name) == 'linen' for a in node.names))
    return False

  def leave_SimpleStatementLine(self, original_node, updated_node):
    if self.linen_locals and not self._done and any(
        self._binds_linen_local(s) for s in original_node.body):
      self._done = True
      self.todo(original_node, WHY)
      return updated_node
    if self._done or self.jax_only or not any(self._is_linen_import(s)
                             for s in original_node.body):
      return updated_node
    self._done = True
    if not any(l.comment is not None and WHY in l.comment.value
               for l in original_node.leading_lines):  # (not said yet)
      self.todo(original_node, WHY)
    return updated_node
