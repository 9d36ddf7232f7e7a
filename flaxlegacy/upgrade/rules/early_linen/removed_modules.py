"""Rule: imports of a removed JAX module that nothing today replaces.

``from jax.lib import xla_client`` (removed in jax 0.9.0; flaxlegacy serves
today's ``jaxlib.xla_client`` in its place, with ``PaddingType``): upgraded
code runs without flaxlegacy, and no public module of today's JAX holds
those names, so the import keeps a TODO naming the replacement
(``_names.UPGRADE_MODULES``; spelled-out ``jax.lib.xla_client.X`` chains
get theirs from the removed-names rule).
"""

import libcst as cst

from flaxlegacy import _names
from flaxlegacy.upgrade.rules.early_linen import _common

GONE = tuple(m for m, today in _names.UPGRADE_MODULES.items() if not today)


def relevant(code, names):  # pylint: disable=unused-argument
  return any(m.rsplit('.', 1)[-1] in code for m in GONE)


class Rule(_common.Rule):
  NAME = 'early_linen_removed_modules'

  def _gone(self, node):
    if isinstance(node, cst.Import):
      names = [_common.facts_lib.dotted(a.name) for a in node.names]
    elif (isinstance(node, cst.ImportFrom) and node.module is not None and
          not node.relative and not isinstance(node.names, cst.ImportStar)):
      mod = _common.facts_lib.dotted(node.module)
      names = [mod] + [f'{mod}.{_common.facts_lib.dotted(a.name)}'
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
