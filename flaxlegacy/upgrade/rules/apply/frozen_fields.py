"""Dict fields in a module body: linen freezes a dict field (a
FrozenDict), legacy kept the dict; where a body maps a pytree function over
one (``jax.tree_map(f, params, mask)``), it is read as the plain dict
(plans.PlainDictField; the linen emitter writes ``flax.core.unfreeze``)."""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import plans


class FrozenFieldRules:
  """``jax.tree_map(f, tree, field)``: the field read as a plain dict."""

  def _unfrozen_tree_args(self, original, updated):
    """``jax.tree_map(f, params, mask)`` with ``mask`` a dict field: linen
    freezes dict fields (a FrozenDict), legacy kept the dict, and a dict
    and a FrozenDict are different pytree nodes: read it unfrozen."""
    name = cst_util.dotted(original.func)
    if not (name and name.startswith('jax.') and name.split('.')[-1] in (
        'tree_map', 'tree_multimap')) or len(original.args) != len(
            updated.args):
      return updated
    args = list(updated.args)
    changed = False
    for i, a in enumerate(original.args):
      if (i and not a.star and isinstance(a.value, cst.Name)
          and a.value.value in self.fields
          and a.value.value not in self.assigned_fields):
        args[i] = args[i].with_changes(value=self.emit.plain_dict_field(
            plans.PlainDictField(value=args[i].value)))
        changed = True
    if not changed:
      return updated
    self.rewrote(original, 'frozen_fields', 'dict field in a pytree map -> '
                 'flax.core.unfreeze(field)')
    return updated.with_changes(args=args)
