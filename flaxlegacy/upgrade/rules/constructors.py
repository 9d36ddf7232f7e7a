"""How a resolved module reference is constructed (shared by the
``.partial`` rules, rules/partials.py, and a module body's calls,
rules/apply/): what it constructs (``module_ref``, a plan of
upgrade/plans.py) and the layer or class at the bottom of a chain of
partials.  Of the rules it imports only ``subclasses`` (a user's subclass
of a legacy layer).  The constructor's linen text -- legacy layer keywords
renamed to linen's, the keywords linen needs for the legacy numbers -- is
the emitter's (upgrade/emit/linen.py)."""


from flaxlegacy.upgrade import layer_table
from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade.rules import subclasses


def partial_root(ref):
  """The layer / class Ref at the bottom of a chain of partials."""
  while ref.kind == 'partial':
    ref = ref.target
  return ref


def module_ref(up, ref, updated_func):
  """The ModuleRef plan (upgrade/plans.py) of what ``ref`` constructs:
  ``updated_func`` (the callee as rewritten) and, for a legacy layer
  itself, the layer, the flaxlegacy layer that serves it (reported here:
  a decision of the rule) or whether it is the user's subclass."""
  if ref.kind != 'layer':
    return plans.ModuleRef(expr=updated_func)
  layer = ref.target
  if layer.linen in layer_table.SHIPPED:
    # a flaxlegacy linen layer (layer_table.py SHIPPED)
    full = layer_table.SHIPPED[layer.linen]
    up.ctx.report.rewritten.append({
        'rule': 'layer', 'line': up.ctx.line(updated_func),
        'what': f'nn.{layer.legacy} -> {layer.linen}',
        'shipped': full})
    return plans.ModuleRef(expr=updated_func, layer=layer, shipped=full)
  return plans.ModuleRef(expr=updated_func, layer=layer,
                         user_subclass=subclasses.is_user_layer(layer))
