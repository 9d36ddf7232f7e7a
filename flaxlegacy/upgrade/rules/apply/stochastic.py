"""Randomness in a module body: ``nn.make_rng()`` ->
``self.make_rng('dropout')``, ``nn.is_stochastic()`` ->
``self.has_rng('dropout')``, ``nn.dropout(x, rate)`` -> ``nn.Dropout``.

The cases decide (plans.RngDraw, plans.HasRng, plans.Dropout); the
rewriter's emitter writes them (``self.emit``)."""

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade.rules import stochastic_names


class StochasticRules:
  """``nn.make_rng`` / ``nn.is_stochastic`` / ``nn.dropout``."""

  def _call_rng(self, original_node, updated_node):  # pylint: disable=unused-argument
    """``nn.make_rng()`` / ``nn.is_stochastic()``, else None; the same
    for the function imported by name (``make_rng()``: rules/
    stochastic_names.py), rewritten alike."""
    f = original_node.func
    name = cst_util.legacy_attr(f, self.ctx.facts.nn_prefixes)
    spelled = 'nn.{}()'
    if name is None:
      name = stochastic_names.called_attr(self, original_node)
      if name is not None:
        spelled = f'{f.value}() (nn.{{}} imported by name)'
    if name == 'make_rng' and not original_node.args:
      self.rewrote(original_node, 'stochastic', spelled.format('make_rng')
                   + " -> self.make_rng('dropout')")
      return self.emit.rng_draw(plans.RngDraw(stream='dropout'))
    if name == 'is_stochastic' and not original_node.args:
      self.rewrote(original_node, 'stochastic',
                   spelled.format('is_stochastic'))
      return self.emit.has_rng(plans.HasRng(stream='dropout'))
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
    # legacy's default is deterministic=False (plans.Dropout: None)
    plan = plans.Dropout(inputs=bound['inputs'], rate=bound['rate'],
                         deterministic=bound.get('deterministic'),
                         rng=bound.get('rng'))
    self.rewrote(original, 'stochastic', 'nn.dropout -> nn.Dropout')
    return self.emit.dropout(plan)
