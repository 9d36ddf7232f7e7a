"""Rule: ``param`` overrides written for flax 0.3 take today's extra argument.

A linen layer subclass that overrides ``param(self, name, init_fn, shape)``
(weight standardisation: ``class StdConv(nn.Conv)``) is called by today's
``nn.Conv`` / ``nn.Dense`` with a fifth argument, ``param_dtype``.  The
override gets ``*unused_init_args, **unused_init_kwargs``: it ignores them
as flax 0.3 never passed them, so the parameters keep their flax 0.3 dtype
(the initializer's default) and values.
"""

import libcst as cst

from flaxlegacy.upgrade.rules.early_linen import _common


def relevant(code, names):  # pylint: disable=unused-argument
  return 'def param(' in code


class Rule(_common.Rule):
  NAME = 'early_linen_param_override'

  def __init__(self, names, report, needed):
    super().__init__(names, report, needed)
    self._layer_classes = []  # stack: is the enclosing class a layer subclass

  def visit_ClassDef(self, node):
    layers = [self.names.linen(b.value) for b in node.bases]
    self._layer_classes.append(
        any(l and l[:1].isupper() and l != 'Module' for l in layers))
    return True

  def leave_ClassDef(self, original_node, updated_node):
    self._layer_classes.pop()
    return updated_node

  def leave_FunctionDef(self, original_node, updated_node):
    if (original_node.name.value != 'param' or not self._layer_classes or
        not self._layer_classes[-1]):
      return updated_node
    p = updated_node.params
    if (not isinstance(p.star_arg, cst.MaybeSentinel) or
        p.star_kwarg is not None or len(p.params) > 4 or p.kwonly_params):
      return updated_node
    params = list(p.params)
    params[-1] = params[-1].with_changes(comma=cst.Comma(
        whitespace_after=cst.SimpleWhitespace(' ')))
    new = p.with_changes(
        params=params,
        star_arg=cst.Param(name=cst.Name('unused_init_args'),
                           comma=cst.Comma(
                               whitespace_after=cst.SimpleWhitespace(' '))),
        star_kwarg=cst.Param(name=cst.Name('unused_init_kwargs')))
    self.rewrote(original_node, 'param override: takes (and ignores) '
                 "today's param_dtype, as flax 0.3 passed none")
    return updated_node.with_changes(params=new)
