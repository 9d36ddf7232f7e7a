"""Rule: imports of a removed JAX module that nothing today replaces.

``from jax.lib import xla_client`` (removed in jax 0.9.0; flaxlegacy serves
today's ``jaxlib.xla_client`` in its place, with ``PaddingType``): upgraded
code runs without flaxlegacy, and no public module of today's JAX holds
all those names.  Per file, ``served_renames`` reads which of the module's
names the file uses (through its imports, ``xc = jax.lib.xla_client``
aliases and spelled-out chains):

* only names flaxlegacy's stand-in defines itself (``PaddingType``, the enum
  research code mapped 'SAME' / 'VALID' to): the module becomes the stand-in
  (``flaxlegacy.compat.xla_client``), which shipping.py copies beside the
  code like the ``xla_bridge`` one;
* only names today's ``jaxlib.xla_client`` still has (``Device``,
  ``Client`` ...): the module becomes ``jaxlib.xla_client``;
* anything else (both kinds, a name neither has, the module handed on as a
  value): the import keeps a TODO naming the replacement
  (``_names.UPGRADE_MODULES``; spelled-out ``jax.lib.xla_client.X`` chains
  get theirs from the removed-names rule).
"""

import ast

import libcst as cst

from flaxlegacy import _names
from flaxlegacy.migrate.check import dotted_name as _dotted
from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade.rules import jax_names
from flaxlegacy.upgrade.rules.early_linen import _common

GONE = tuple(m for m, today in _names.UPGRADE_MODULES.items() if not today)

# removed module -> (its stand-in in flaxlegacy, the names the stand-in
# defines itself (copied into the upgraded tree), today's module that still
# has the rest of its names)
STAND_INS = {
    'jax.lib.xla_client': ('flaxlegacy.compat.xla_client',
                           frozenset({'PaddingType'}), 'jaxlib.xla_client'),
}


def _has(module, name):
  try:
    import importlib  # pylint: disable=g-import-not-at-top
    return hasattr(importlib.import_module(module), name)
  except Exception:  # pylint: disable=broad-except
    return False


def _names_used(tree, imports, removed):
  """The attributes a file reads from the module ``removed``, or None when
  it uses the module otherwise (as a value, ``from removed import X`` of a
  name, a ``global`` rebinding ...)."""
  aliases = set()  # local names holding the module
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
      for a in node.names:
        if f'{node.module}.{a.name}' == removed:
          aliases.add(a.asname or a.name)
        elif node.module == removed:
          return None  # from jax.lib.xla_client import X
    elif isinstance(node, ast.Import):
      for a in node.names:
        if a.name == removed and a.asname:
          aliases.add(a.asname)
  def qualified(node):
    return jax_names.qualify_name(_dotted(node), imports)
  for node in ast.walk(tree):
    if (isinstance(node, ast.Assign) and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and qualified(node.value) == removed):
      aliases.add(node.targets[0].id)
  used = set()
  bases = set()  # ids of the nodes read as ``module.attr``
  for node in ast.walk(tree):
    if isinstance(node, ast.Attribute):
      if isinstance(node.value, ast.Name) and node.value.id in aliases:
        used.add(node.attr)
        bases.add(id(node.value))
      elif qualified(node.value) == removed and _dotted(
          node.value) not in aliases:
        used.add(node.attr)
        bases.add(id(node.value))
        n = node.value
        while isinstance(n, ast.Attribute):
          bases.add(id(n))
          n = n.value
        bases.add(id(n))
  for node in ast.walk(tree):
    if (isinstance(node, ast.Name) and node.id in aliases
        and id(node) not in bases and not isinstance(node.ctx, ast.Store)):
      return None  # the module handed on as a value
  return used


def served_renames(code, imports):
  """{removed module: what it becomes in this file} for the removed modules
  of ``STAND_INS`` that the file's uses allow (module docstring)."""
  out = {}
  for removed, (stand_in, defined, today) in STAND_INS.items():
    if removed.rsplit('.', 1)[-1] not in code:
      continue
    try:
      tree = ast.parse(code)
    except SyntaxError:
      return {}
    used = _names_used(tree, imports, removed)
    if used is None:
      continue
    if used <= defined:
      out[removed] = stand_in
    elif all(not n.startswith('_') and _has(today, n) for n in used):
      out[removed] = today
  return out


def relevant(code, names):  # pylint: disable=unused-argument
  return any(m.rsplit('.', 1)[-1] in code for m in GONE)


class Rule(_common.Rule):
  NAME = 'early_linen_removed_modules'

  def _gone(self, node):
    if isinstance(node, cst.Import):
      names = [cst_util.dotted(a.name) for a in node.names]
    elif (isinstance(node, cst.ImportFrom) and node.module is not None and
          not node.relative and not isinstance(node.names, cst.ImportStar)):
      mod = cst_util.dotted(node.module)
      names = [mod] + [f'{mod}.{cst_util.dotted(a.name)}'
                       for a in node.names]
    else:
      return None
    return next((n for n in names if n in GONE), None)

  def leave_SimpleStatementLine(self, original_node, updated_node):
    for stmt in original_node.body:
      gone = self._gone(stmt)
      if gone:
        self.todo(original_node, f'{gone} was removed from JAX; today: '
                  f'{_names.MODULES_BY_LEGACY[gone].modern}')
    return updated_node
