"""Training steps of the program pass: what legacy code did with an
optimizer once made.  ``opt.apply_gradient(g)`` ->
``opt.apply_gradients(grads=g)`` (a per-step ``learning_rate`` set in the
optax state's hyperparams); ``opt.optimize(loss_fn)`` ->
``jax.value_and_grad`` + ``apply_gradients``; ``opt.replicate()`` /
``unreplicate()`` -> ``flax.jax_utils``; ``opt.target`` -> ``opt.params``;
``opt.state.step`` -> ``opt.step``.

A mixin of ``programs.ProgramRewriter``.  The optimizer methods are the
table ``OPTIMIZER_METHODS`` (method name -> case), consulted for a call
``opt.<method>(...)`` of a name that holds an optimizer."""

import libcst as cst

from flaxlegacy.upgrade.rules.program import shared
from flaxlegacy.upgrade.rules.program.shared import NEXT  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.rules.program.shared import OPT  # pylint: disable=g-importing-member

_e = shared.expr_node
_s = shared.stmt_node


class TrainingStepRules:
  """Optimizer methods and attributes, the per-step learning rate."""

  def _apply_gradients(self, opt, grads, extra_args, node=None):
    """``opt.apply_gradients(grads=...)`` source, the per-step learning
    rate set in the optax state's hyperparams; None (with a TODO on
    ``node``) when the call passes another per-step argument: the optax
    transformation built elsewhere does not take it per step, and dropping
    it would change the numbers silently."""
    lr = None
    for a in extra_args:
      if a.keyword is not None and a.keyword.value == 'learning_rate':
        lr = self.ctx.code_of(a.value)
      elif node is not None:
        what = (f'{a.keyword.value}=' if a.keyword is not None
                else ('**' if a.star == '**' else '*' if a.star else ''))
        method = (node.func.attr.value if isinstance(node, cst.Call)
                  and isinstance(node.func, cst.Attribute)
                  else 'apply_gradient')
        self.todo(node, f'optimizer.{method}(..., {what}...): a '
                  'hyper-parameter set per step other than learning_rate is '
                  'not carried into the optax transformation (the upgrade '
                  'sets only learning_rate per step); build the '
                  'transformation with optax.inject_hyperparams and set it '
                  'in opt_state.hyperparams by hand')
        return None
    if lr is None:
      return f'{opt}.apply_gradients(grads={grads})'
    return (f"{opt}.replace(opt_state={opt}.opt_state._replace(hyperparams="
            f"{{**{opt}.opt_state.hyperparams, 'learning_rate': {lr}}}))"
            f".apply_gradients(grads={grads})")

  def _assign_optimize(self, orig, stmt, line):
    """``new_opt, loss[, aux] = opt.optimize(loss_fn)``."""
    t = stmt.targets[0].target
    v = stmt.value
    ov = orig.value
    attr = ov.func.attr.value
    # new_opt, loss[, aux] = opt.optimize(loss_fn)
    if attr == 'optimize' and isinstance(t, (cst.Tuple, cst.List)) and (
        self.kind_of(ov.func.value) == OPT) and ov.args:
      names = [self.ctx.code_of(e.value) for e in t.elements]
      src = v if isinstance(v, cst.Call) and len(v.args) == len(
          ov.args) else ov
      opt = self.ctx.code_of(ov.func.value)
      loss_fn = self.ctx.code_of(src.args[0].value)
      extra = [a for a in src.args[1:]]
      if len(names) == 3:
        vg = (f'({names[1]}, {names[2]}), _grad = jax.value_and_grad('
              f'{loss_fn}, has_aux=True)({opt}.params)\n')
      elif len(names) == 2:
        vg = (f'{names[1]}, _grad = jax.value_and_grad({loss_fn})'
              f'({opt}.params)\n')
      else:
        return None
      apply = self._apply_gradients(opt, '_grad', extra, ov)
      if apply is None:
        return None
      self.imports.add('import jax')
      self.note(line, 'optimizer.optimize -> jax.value_and_grad + '
                'apply_gradients')
      return [_s(vg), _s(f'{names[0]} = {apply}\n')]
    return NEXT

  def _call_optimizer_method(self, original_node, updated_node):
    """``opt.<method>(...)`` of an optimizer: the case of
    ``OPTIMIZER_METHODS`` for the method, if any."""
    f = original_node.func
    if isinstance(f, cst.Attribute) and self.kind_of(f.value) == OPT:
      case = OPTIMIZER_METHODS.get(f.attr.value)
      if case is not None:
        return case(self, original_node, updated_node)
    return None

  def _apply_gradient(self, original_node, updated_node):
    """``opt.apply_gradient(g, ...)`` -> ``opt.apply_gradients(grads=g)``."""
    f = original_node.func
    if not original_node.args:
      return None
    opt_src = cst.Module([]).code_for_node(updated_node.func.value)
    grads = self.ctx.code_of(original_node.args[0].value).rstrip(', ')
    apply = self._apply_gradients(opt_src, grads, original_node.args[1:],
                                  original_node)
    if apply is None:
      return updated_node
    if isinstance(f.value, cst.Name) and self.scope.lookup(
        'bare_states', f.value.value):
      # created here with apply_fn=None: its target is not known to be
      # a model's parameter tree (sam's test optimizes a bare array)
      self.todo(original_node, 'apply_gradients: this optimizer was '
                'created on a target not known to be a parameter tree; '
                'TrainState.apply_gradients refuses a bare array (it '
                'tests `in` on it): wrap the target in a dict')
    self.note(original_node, 'apply_gradient -> apply_gradients')
    return _e(apply)

  def _replicate(self, original_node, updated_node):
    """``opt.replicate()`` / ``opt.unreplicate()`` -> ``jax_utils``."""
    f = original_node.func
    if original_node.args:
      return None
    opt_src = cst.Module([]).code_for_node(updated_node.func.value)
    self.imports.add('from flax import jax_utils')
    self.note(original_node, f'optimizer.{f.attr.value}() -> jax_utils')
    return _e(f'jax_utils.{f.attr.value}({opt_src})')

  def _attr_target(self, original_node, updated_node, k):
    """``opt.target`` -> ``opt.params``."""
    if k == OPT:
      return updated_node.with_changes(attr=cst.Name('params'))
    return updated_node

  def _attr_step(self, original_node, updated_node, k):
    """``opt.state.step`` -> ``opt.step``."""
    if isinstance(original_node.value, cst.Attribute) and (
        original_node.value.attr.value == 'state') and (
            self.kind_of(original_node.value.value) == OPT):
      return updated_node.value.value.with_changes() if False else \
          cst.Attribute(value=updated_node.value.value, attr=cst.Name('step'))
    return updated_node


  def _attr_state(self, original_node, updated_node, k):
    """``opt.state`` other than ``opt.state.step``: a TODO (the legacy
    ``OptimizerState(step, param_states)`` has no TrainState field of its
    structure)."""
    if k == OPT and id(original_node) not in self._state_steps:
      self.todo(original_node, f'{self.ctx.code_of(original_node)}: the '
                'legacy optimizer state (step, param_states) has no '
                'counterpart of its structure on the TrainState: the step '
                'is .step, the optax state .opt_state (its own structure)')
    return updated_node


# method name -> case; a case answers None where the call is not its form
# (the pass tries its next rule)
OPTIMIZER_METHODS = {
    'apply_gradient': TrainingStepRules._apply_gradient,  # pylint: disable=protected-access
    'replicate': TrainingStepRules._replicate,  # pylint: disable=protected-access
    'unreplicate': TrainingStepRules._replicate,  # pylint: disable=protected-access
}
