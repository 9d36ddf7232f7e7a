"""Rule: flax 0.3 attention's positional mask -> ``mask=``.

flax 0.3's ``MultiHeadDotProductAttention.__call__(inputs_q, inputs_kv,
mask=None, deterministic=None)``; today's third positional parameter is
``inputs_v``.  A call with three or four positional arguments, on
``nn.MultiHeadDotProductAttention(...)`` directly or on an attribute the
class assigned one to (``self.attn = nn.MultiHeadDotProductAttention(...)``
in ``setup``), passes the third as ``mask=`` and the fourth as
``deterministic=``.
"""

import libcst as cst

from flaxlegacy.upgrade import walk
from flaxlegacy.upgrade.rules.early_linen import _common

MHA = 'MultiHeadDotProductAttention'


def relevant(code, names):  # pylint: disable=unused-argument
  return MHA in code


def _self_attr(node):
  if (isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name)
      and node.value.value == 'self'):
    return node.attr.value
  return None


class Rule(_common.Rule):
  NAME = 'early_linen_attention'

  def __init__(self, names, report, needed):
    super().__init__(names, report, needed)
    self._attrs = []  # stack per class: self.<attr> holding an attention

  def visit_ClassDef(self, node):
    attrs = set()
    rule = self

    class V(walk.FastVisitor):

      def visit_Assign(self, a):
        if (isinstance(a.value, cst.Call) and
            rule.names.linen(a.value.func) == MHA):
          for t in a.targets:
            if _self_attr(t.target):
              attrs.add(_self_attr(t.target))

    node.visit(V())
    self._attrs.append(attrs)
    return True

  def leave_ClassDef(self, original_node, updated_node):
    self._attrs.pop()
    return updated_node

  def leave_Call(self, original_node, updated_node):
    f = original_node.func
    attention = (isinstance(f, cst.Call) and self.names.linen(f.func) == MHA)
    attr = _self_attr(f)
    attention = attention or (attr is not None and self._attrs and
                              attr in self._attrs[-1])
    if not attention:
      return updated_node
    given = _common.positional(updated_node)
    if given is None or len(given) not in (3, 4):
      return updated_node
    args = list(updated_node.args)
    keywords = ('mask', 'deterministic')
    for i, name in zip((2, 3), keywords):
      if i < len(given):
        args[i] = args[i].with_changes(
            keyword=cst.Name(name), equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(''),
                whitespace_after=cst.SimpleWhitespace('')))
    self.rewrote(original_node, 'attention(inputs_q, inputs_kv, mask) -> '
                 'attention(inputs_q, inputs_kv, mask=mask)')
    return updated_node.with_changes(args=args)
