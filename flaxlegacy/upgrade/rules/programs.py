"""Rules for the code around module definitions (program level).

Runs as a pass before the module rules, on the legacy source, and rewrites
the program-level legacy API into linen + optax:

* model life cycle: ``M.init_by_shape(rng, [(shape, dtype)])`` /
  ``M.create_by_shape`` / ``M.init(rng, x)`` / ``M.create(rng, x)`` ->
  ``M(...).init(rng, ...)['params']`` (the parameter tree keeps its legacy
  names: the module rules keep legacy auto-names); ``nn.Model(M, params)``
  -> ``params``; ``model.params`` -> ``model``; a call ``model(x)`` ->
  ``state.apply_fn({'params': model}, x)`` where the model comes from a
  TrainState in scope, else ``M().apply({'params': model}, x)`` with the one
  module class the codebase builds models of;
* ``with nn.stateful(s) as t:`` around model calls -> ``apply`` with
  ``{**s}`` variables and ``mutable=['batch_stats']``, the new state
  assigned to ``t``; ``nn.stateful(s, mutable=False)`` -> ``apply`` with the
  state, nothing mutable; ``with nn.stateful() as t:`` around an init ->
  ``t`` = the non-parameter collections of the init; ``with
  nn.stochastic(rng):`` -> ``rngs={'dropout': rng}`` on the model calls;
* optimizers: ``optim.X(...).create(target)`` ->
  ``train_state.TrainState.create(apply_fn=..., params=target, tx=...)``
  with plain optax where its numbers equal legacy (table ``OPTAX``), else
  the legacy rule from ``flaxlegacy.migrate.legacy_optax`` (plain optax,
  same constructor arguments; table ``LEGACY_OPTAX``);
  ``optax.inject_hyperparams`` where the codebase passes ``learning_rate``
  per step; ``optim.MultiOptimizer((optim.ModelParamTraversal(f), opt),
  ...)`` -> ``optax.multi_transform`` labelled by
  ``legacy_optax.traversal_labels(f, ...)``; a user-written ``OptimizerDef``
  subclass stays (TODO) and its ``create`` uses ``as_optax()``; ``opt.target`` -> ``opt.params``; ``opt.state.step`` ->
  ``opt.step``; ``opt.apply_gradient(g)`` -> ``opt.apply_gradients(grads=g)``;
  ``opt.optimize(loss_fn)`` -> ``jax.value_and_grad`` + ``apply_gradients``;
  ``opt.replicate()`` / ``unreplicate()`` -> ``flax.jax_utils``;
* checkpoints: ``checkpoints.restore_checkpoint(d, opt)`` of a TrainState ->
  ``flaxlegacy.migrate.upgraded.restore_checkpoint(d, opt)`` (plain flax
  + serialization, importable with ``FLAXLEGACY=off``), which also
  reads a checkpoint the legacy program wrote (converted at load);
  ``checkpoints.save_checkpoint`` -> ``legacy_checkpoints.save_checkpoint``,
  which writes legacy's file format (one msgpack file per step) rather than
  today's default Orbax directory;
* ``flax.training.lr_schedule`` stays (today's flax still has it, same
  values); ``optim.DynamicScale`` ->
  ``flax.training.dynamic_scale.DynamicScale``.

Which names hold what is tracked per function (``Scope``): assignments from
the calls above, parameters named ``optimizer`` / ``model`` (the legacy
examples' convention), and the first parameter of a loss function passed to
``optimize`` / ``jax.grad`` / ``jax.value_and_grad`` of a ``.target``.
Anything not certain keeps its code and gets a TODO.

The pass is one libcst transformer, ``ProgramRewriter``, composed of one
mixin per legacy concept, each in its own module of ``rules/program/``
(issue 24's "one rule per legacy concept"):

* ``scopes.py``: ``Scope`` and the hooks that track it (classes,
  functions, assignments);
* ``values.py``: what a name or expression holds (shared by all);
* ``lifecycle.py``: the model life cycle (init / create, partial, call);
* ``models.py``: ``nn.Model`` values, their calls and attributes;
* ``stateful.py``: ``nn.stateful`` / ``nn.stochastic`` blocks,
  ``nn.Collection`` values;
* ``optimizers.py``: ``flax.optim`` definitions and ``create``;
* ``user_optimizers.py``: user-written ``OptimizerDef`` subclasses;
* ``training_steps.py``: what a program does with an optimizer
  (``apply_gradient``, ``optimize``, ``replicate``, ``.target``, ...);
* ``checkpoints.py``: ``flax.training.checkpoints``;
* ``annotations.py``: legacy types in annotations;
* ``imports.py``: the import lines, after the walk;
* ``shared.py``: constants and source helpers (imports no other of them).

A concept contributes its hooks and cases as mixin methods; where two
concepts handle the same node type, the one hook here tries their cases in
a fixed order, the order of the tables ``CALL_RULES`` (calls),
``ASSIGN_RULES`` (assignment statements) and ``ATTRIBUTE_CASES``
(attribute names).  A case answers None (``NEXT`` for an assignment, where
None means "leave the statement") when the node is not its form, and the
next one is tried.  Mixins rather than delegation: the cases read and
update one rewriter's state (scope, stacks, imports, report) as the single
class did, and the helper modules (rules/lifecycle_runtime.py,
rules/attention_cache.py, rules/optimizer_defs.py) keep taking the
rewriter itself.
"""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import emit as emit_lib
from flaxlegacy.upgrade import walk
from flaxlegacy.upgrade.collectors.programs import LEGACY_OPTAX  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.collectors.programs import LIFECYCLE  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.collectors.programs import MOMENTUM_WITH_DECAY  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.collectors.programs import OPTAX  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.collectors.programs import OPTAX_FIXED  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.collectors.programs import TX_RULES  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.rules import lifecycle_runtime
from flaxlegacy.upgrade.rules.program import annotations
from flaxlegacy.upgrade.rules.program import checkpoints
from flaxlegacy.upgrade.rules.program import stateful
from flaxlegacy.upgrade.rules.program import imports
from flaxlegacy.upgrade.rules.program import lifecycle
from flaxlegacy.upgrade.rules.program import models
from flaxlegacy.upgrade.rules.program import optimizers
from flaxlegacy.upgrade.rules.program import scopes
from flaxlegacy.upgrade.rules.program import shared
from flaxlegacy.upgrade.rules.program import training_steps
from flaxlegacy.upgrade.rules.program import user_optimizers
from flaxlegacy.upgrade.rules.program import values
from flaxlegacy.upgrade.rules.program.shared import MODEL  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.rules.program.shared import NEXT  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.rules.program.shared import OPT  # pylint: disable=g-importing-member,unused-import

Scope = scopes.Scope


def relevant(file_facts, codebase=None, path=None):
  """Whether the program pass has anything to look at in this file: its
  words, or nn.Model values that the codebase hands to it (a library
  function reading ``model.params``)."""
  if getattr(file_facts, 'program_words', True):
    return True
  u = codebase.analyses.model_uses() if codebase is not None else None
  return u is not None and path in u.files


class ProgramRewriter(scopes.ScopeRules, values.ValueQueries,
                      lifecycle.LifecycleRules, models.ModelRules,
                      stateful.CollectionRules,
                      optimizers.OptimizerRules,
                      user_optimizers.UserOptimizerRules,
                      training_steps.TrainingStepRules,
                      checkpoints.CheckpointRules,
                      annotations.AnnotationRules,
                      cst_util.TodoComments, walk.FastTransformer):
  """The program-level pass over one legacy file: the concept mixins, and
  the hooks several of them share."""

  def __init__(self, ctx):
    super().__init__()
    self.ctx = ctx
    # the target's emitter: the cases decide plans (upgrade/plans.py), it
    # writes them (holds this rewriter weakly)
    self.emit = emit_lib.emitter(ctx.target, self, emit_lib.PROGRAM_TARGETS)
    self._todos = []
    self.f = ctx.facts
    self.codebase = ctx.codebase
    self._kept_names = {}  # (scope, name) -> why its object is kept
    # optimizer definitions whose create(...) stays legacy: they stay too
    self._kept_defs = None
    self._kept_def_calls = set()  # ids of those optim.X(...) calls
    self.model_class = shared.codebase_model_class(
        ctx.codebase, shared.rel_of(ctx.codebase, ctx.facts))
    self.nn_file = bool(ctx.facts.nn_prefixes)
    self.per_step_lr = shared.codebase_per_step_lr(ctx.codebase)
    self.scope = Scope()
    self._quals = []  # enclosing class / function names (flow.py scopes)
    self.imports = set()  # statements to add
    self._multi_src = {}  # id(optim.MultiOptimizer call) -> optax source
    self.rewrites = []
    self._stateful = []  # stack of (state expr src or None, target, mutable)
    self._stochastic = []
    self._assign_values = set()  # ids of assigned Call nodes (statements)
    self._optdef_values = set()  # ids of optim.X(...) assigned to a name
    self._unknown_calls = set()  # ids of model calls with a TODO
    self._rewritten_calls = set()  # ids of model calls leave_Call rewrote
    self._traversals = None  # see _traversal_objects
    self.module = None  # the file's module (run sets it)
    self._in_type = 0  # inside a type annotation / typing subscript
    self._type_subscripts = set()
    self._bare_creates = set()  # ids of create(...) calls of unknown targets
    self._called_funcs = set()  # ids of the func of every call (visit_Call)
    self._state_steps = set()  # ids of X in every X.step (visit_Attribute)

  def leave_SimpleStatementLine(self, original_node, updated_node):
    if len(updated_node.body) != 1:
      return updated_node
    stmt = updated_node.body[0]
    orig = original_node.body[0]
    new = self._lifecycle_statement(orig, stmt, updated_node)
    if new is not NEXT:
      return new
    new = None
    if isinstance(stmt, cst.Assign) and len(stmt.targets) == 1:
      new = self._assign(orig, stmt, original_node)
    elif isinstance(stmt, cst.Expr):
      new = self._stateful_expression(orig, stmt, original_node)
    if new is not None:
      return cst.FlattenSentinel([
          (s.with_changes(leading_lines=updated_node.leading_lines)
           if i == 0 else s) for i, s in enumerate(new)])
    return updated_node

  def _assign(self, orig, stmt, line):
    """The statements ``stmt`` (a one-target assignment) becomes, or None:
    the first case of ``ASSIGN_RULES`` that takes it, else a model call
    (stateful.py)."""
    ov = orig.value
    if isinstance(ov, cst.Call) and isinstance(ov.func, cst.Attribute):
      for rule in ASSIGN_RULES:
        new = rule(self, orig, stmt, line)
        if new is not NEXT:
          return new
    return self._stateful_assign(orig, stmt, line)

  def visit_Call(self, node):
    self._called_funcs.add(id(node.func))

  def visit_Attribute(self, node):
    if node.attr.value == 'step':
      self._state_steps.add(id(node.value))

  def leave_Call(self, original_node, updated_node):
    if self._stateful:
      lifecycle_runtime.carried_call(self, original_node)
    for rule in CALL_RULES:
      new = rule(self, original_node, updated_node)
      if new is not None:
        return new
    return updated_node

  def leave_Attribute(self, original_node, updated_node):
    new = lifecycle_runtime.module_call(self, original_node, updated_node)
    if new is not None:
      return new
    new = self._type_attribute(original_node)
    if new is not None:
      return new
    k = self.kind_of(original_node.value)
    case = ATTRIBUTE_CASES.get(original_node.attr.value)
    if case is None:
      return updated_node
    return case(self, original_node, updated_node, k)


# pylint: disable=protected-access
# The cases of a call, in the order they are tried (the first answer that
# is not None wins).
CALL_RULES = (
    stateful.CollectionRules._call_cache_init,
    stateful.CollectionRules._call_legacy_rng,
    lifecycle.LifecycleRules._call_partial,
    lifecycle.LifecycleRules._call_module_call,
    stateful.CollectionRules._call_as_dict,
    optimizers.OptimizerRules._call_optim_create,
    user_optimizers.UserOptimizerRules._call_user_optimizer,
    optimizers.OptimizerRules._call_definition_create,
    optimizers.OptimizerRules._call_optim_constructor,
    training_steps.TrainingStepRules._call_optimizer_method,
    models.ModelRules._call_model,
    checkpoints.CheckpointRules._call_checkpoint,
    optimizers.OptimizerRules._call_dynamic_scale,
    models.ModelRules._call_isinstance,
    models.ModelRules._call_inline_model,
    models.ModelRules._call_nn_model,
)

# The cases of a one-target assignment of ``X.attr(...)``, in order (the
# first answer that is not NEXT wins; then a model call, stateful.py).
ASSIGN_RULES = (
    lifecycle.LifecycleRules._assign_runtime,
    lifecycle.LifecycleRules._assign_unknown_pair,
    lifecycle.LifecycleRules._assign_lifecycle,
    training_steps.TrainingStepRules._assign_optimize,
)

# attribute name -> its case, given the kind of the value before the dot
# (asked for every attribute that is not a legacy type: the first use of a
# name kept legacy says so there)
ATTRIBUTE_CASES = {
    'target': training_steps.TrainingStepRules._attr_target,
    'step': training_steps.TrainingStepRules._attr_step,
    'state': training_steps.TrainingStepRules._attr_state,
    'call': lifecycle.LifecycleRules._attr_module_call,
    'params': models.ModelRules._attr_params,
}
# pylint: enable=protected-access


def run(ctx, module):
  """The program pass over one file; returns the new module."""
  rw = ProgramRewriter(ctx)
  rw.module = module
  new = rw.walk(module)
  return imports.finish(ctx, rw, new)
