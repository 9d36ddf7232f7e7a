"""Rule: flax 0.3's ``EarlyStopping.update`` tuple -> today's state.

flax 0.3: ``has_improved, state = state.update(metric)``; today ``update``
returns the new state, with ``has_improved`` as a field.  In a file that
imports ``flax.training.early_stopping``, such an assignment becomes::

    state = state.update(metric)
    has_improved = state.has_improved

(the second line dropped where the flag went to ``_``).
"""

import libcst as cst

from flaxlegacy.upgrade.rules.early_linen import _common


def relevant(code, names):
  return '.update(' in code and names.imports_module(
      'flax.training.early_stopping')


class Rule(_common.Rule):
  NAME = 'early_linen_early_stopping'

  def leave_SimpleStatementLine(self, original_node, updated_node):
    if len(updated_node.body) != 1 or not isinstance(updated_node.body[0],
                                                     cst.Assign):
      return updated_node
    assign = updated_node.body[0]
    if (len(assign.targets) != 1 or
        not isinstance(assign.targets[0].target, cst.Tuple) or
        len(assign.targets[0].target.elements) != 2 or
        not isinstance(assign.value, cst.Call) or
        not isinstance(assign.value.func, cst.Attribute) or
        assign.value.func.attr.value != 'update'):
      return updated_node
    flag, state = [e.value for e in assign.targets[0].target.elements]
    if not isinstance(state, cst.Name):
      self.todo(original_node, 'EarlyStopping.update returns the new state '
                'today (flax 0.3: (has_improved, state)); unpack by hand')
      return updated_node
    first = updated_node.with_changes(body=[assign.with_changes(
        targets=[cst.AssignTarget(target=state)])])
    self.rewrote(original_node, 'has_improved, state = state.update(m) -> '
                 'state = state.update(m); state.has_improved')
    if isinstance(flag, cst.Name) and flag.value == '_':
      return first
    second = cst.SimpleStatementLine(body=[cst.Assign(
        targets=[cst.AssignTarget(target=flag)],
        value=cst.Attribute(value=state, attr=cst.Name('has_improved')))])
    return cst.FlattenSentinel([first, second])
