"""Training steps of the program pass: what legacy code did with an
optimizer once made.  ``opt.apply_gradient(g)`` ->
``opt.apply_gradients(grads=g)`` (a per-step ``learning_rate`` set in the
optax state's hyperparams); ``opt.optimize(loss_fn)`` ->
``jax.value_and_grad`` + ``apply_gradients``; ``opt.replicate()`` /
``unreplicate()`` -> ``flax.jax_utils``; ``opt.target`` -> ``opt.params``;
``opt.state.step`` -> ``opt.step``; ``opt.compute_gradient(loss_fn)`` ->
the shipped ``legacy_model.compute_gradient(loss_fn, opt.params)``.

A mixin of ``programs.ProgramRewriter``.  A case decides a plan
(plans.ApplyGradients, Optimize, ComputeGradient, Replicate, ParamsOf,
StepOf) that the
pass's emitter (``self.emit``) writes; TODOs and report lines stay here.
The optimizer methods are the
table ``OPTIMIZER_METHODS`` (method name -> case), consulted for a call
``opt.<method>(...)`` of a name that holds an optimizer."""

import libcst as cst

from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade.rules import objects
from flaxlegacy.upgrade.rules.program.shared import NEXT  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.rules.program.shared import OPT  # pylint: disable=g-importing-member

# _per_step_lr's answer when the call passes a per-step argument the
# upgrade does not carry (a TODO is left)
REFUSED = object()


class TrainingStepRules:
  """Optimizer methods and attributes, the per-step learning rate."""

  def _per_step_lr(self, extra_args, node=None):
    """The learning rate ``extra_args`` (the legacy call's arguments past
    the gradients) set for this step: its expression as written, or None;
    REFUSED (with a TODO on ``node``) when the call passes another per-step
    argument: the optax transformation built elsewhere does not take it
    per step, and dropping it would change the numbers silently."""
    lr = None
    for a in extra_args:
      if a.keyword is not None and a.keyword.value == 'learning_rate':
        lr = a.value
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
        return REFUSED
    return lr

  def _assign_optimize(self, orig, stmt, line):
    """``new_opt, loss[, aux] = opt.optimize(loss_fn)`` (plans.Optimize)."""
    t = stmt.targets[0].target
    v = stmt.value
    ov = orig.value
    attr = ov.func.attr.value
    # new_opt, loss[, aux] = opt.optimize(loss_fn)
    if attr == 'optimize' and isinstance(t, (cst.Tuple, cst.List)) and (
        self.kind_of(ov.func.value) == OPT) and ov.args:
      targets = [e.value for e in t.elements]
      src = v if isinstance(v, cst.Call) and len(v.args) == len(
          ov.args) else ov
      if len(targets) not in (2, 3):
        return None
      lr = self._per_step_lr(src.args[1:], ov)
      if lr is REFUSED:
        return None
      self.note(line, 'optimizer.optimize -> jax.value_and_grad + '
                'apply_gradients')
      return self.emit.optimize(plans.Optimize(
          state=ov.func.value, loss_fn=src.args[0].value,
          new_state=targets[0], loss=targets[1],
          aux=targets[2] if len(targets) == 3 else None, learning_rate=lr))
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
    """``opt.apply_gradient(g, ...)`` -> ``opt.apply_gradients(grads=g)``
    (plans.ApplyGradients)."""
    f = original_node.func
    if not original_node.args:
      return None
    lr = self._per_step_lr(original_node.args[1:], original_node)
    if lr is REFUSED:
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
    return self.emit.apply_gradients(plans.ApplyGradients(
        updated_node.func.value, original_node.args[0].value, lr))

  def _compute_gradient(self, original_node, updated_node):
    """``opt.compute_gradient(loss_fn)`` -> ``legacy_model.compute_gradient(
    loss_fn, opt.params)`` (plans.ComputeGradient)."""
    receiver = original_node.func.value
    if not (self.nn_file or getattr(self.f, 'optim_locals', None) or (
        isinstance(receiver, cst.Name) and objects.name_kind(
            self.codebase, self.f.path, self._qual(), receiver.value,
            self.model_class) == ('optimizer', None, False))):
      # only the legacy examples' name (``optimizer``) says it is one, in a
      # file that imports no legacy Flax: TensorFlow's optimizers have a
      # compute_gradients too (rigl's imagenet_train_eval.py)
      return None
    args = original_node.args
    if len(args) != 1 or args[0].keyword is not None or args[0].star:
      self.todo(original_node, f'optimizer.{original_node.func.attr.value}'
                '(...): legacy took the loss function alone; port by hand')
      return updated_node
    self.note(original_node, f'optimizer.{original_node.func.attr.value} -> '
              'legacy_model.compute_gradient')
    return self.emit.compute_gradient(plans.ComputeGradient(
        updated_node.func.value, updated_node.args[0].value))

  def _replicate(self, original_node, updated_node):
    """``opt.replicate()`` / ``opt.unreplicate()`` (plans.Replicate)."""
    f = original_node.func
    if original_node.args:
      return None
    self.note(original_node, f'optimizer.{f.attr.value}() -> jax_utils')
    return self.emit.replicate(plans.Replicate(f.attr.value,
                                               updated_node.func.value))

  def _attr_target(self, original_node, updated_node, k):
    """``opt.target`` (plans.ParamsOf)."""
    if k == OPT:
      return self.emit.params_of(plans.ParamsOf(updated_node))
    return updated_node

  def _attr_step(self, original_node, updated_node, k):
    """``opt.state.step`` (plans.StepOf)."""
    if isinstance(original_node.value, cst.Attribute) and (
        original_node.value.attr.value == 'state') and (
            self.kind_of(original_node.value.value) == OPT):
      return self.emit.step_of(plans.StepOf(updated_node.value.value))
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
    'compute_gradient': TrainingStepRules._compute_gradient,  # pylint: disable=protected-access
    'compute_gradients': TrainingStepRules._compute_gradient,  # pylint: disable=protected-access
    'replicate': TrainingStepRules._replicate,  # pylint: disable=protected-access
    'unreplicate': TrainingStepRules._replicate,  # pylint: disable=protected-access
}
