"""Randomness in a module body: ``nn.make_rng()`` ->
``self.make_rng('dropout')``, ``nn.is_stochastic()`` ->
``self.has_rng('dropout')``, ``nn.dropout(x, rate)`` -> ``nn.Dropout``."""

import libcst as cst

from flaxlegacy.upgrade import cst_util


class StochasticRules:
  """``nn.make_rng`` / ``nn.is_stochastic`` / ``nn.dropout``."""

  def _call_rng(self, original_node, updated_node):  # pylint: disable=unused-argument
    """``nn.make_rng()`` / ``nn.is_stochastic()``, else None."""
    f = original_node.func
    name = cst_util.legacy_attr(f, self.ctx.facts.nn_prefixes)
    if name == 'make_rng' and not original_node.args:
      self.rewrote(original_node, 'stochastic', "nn.make_rng() -> "
                   "self.make_rng('dropout')")
      return cst_util.expr("self.make_rng('dropout')")
    if name == 'is_stochastic' and not original_node.args:
      self.rewrote(original_node, 'stochastic', 'nn.is_stochastic()')
      return cst_util.expr("self.has_rng('dropout')")
    return None

  def _dropout(self, original, updated):
    args = list(updated.args)
    names = ('inputs', 'rate', 'deterministic', 'rng')
    bound = {}
    for i, a in enumerate(args):
      key = cst_util.kw(a) or (names[i] if i < len(names) else None)
      if a.star or key not in names:
        self.todo(original, 'nn.dropout call form')
        return updated
      bound[key] = a.value
    ctor = [cst_util.arg(bound['rate'], 'rate')]
    # legacy's default is deterministic=False; linen's Dropout has none
    ctor.append(cst_util.arg(bound.get('deterministic', cst_util.expr('False')),
                     'deterministic'))
    call = [cst_util.arg(bound['inputs'])]
    if 'rng' in bound:
      call.append(cst_util.arg(bound['rng'], 'rng'))
    self.rewrote(original, 'stochastic', 'nn.dropout -> nn.Dropout')
    return cst.Call(func=cst.Call(func=cst_util.expr(self._prefix() + '.Dropout'),
                                  args=cst_util.clean_args(ctor)),
                    args=cst_util.clean_args(call))
