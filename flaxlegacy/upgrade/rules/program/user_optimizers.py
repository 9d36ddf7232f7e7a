"""User-written ``OptimizerDef`` subclasses in the program pass.

A definition rules/optimizer_defs.py translates becomes a function
returning an optax transformation, and ``UserDef(...).create(target)`` a
TrainState with it as ``tx`` (``optax.inject_hyperparams`` around it where
the learning rate is set per step); one kept stays (with a TODO) and its
``create`` uses ``as_optax()``.  Here: finding the definition a call
names, in this file or an imported one, and its plan.

A mixin of ``programs.ProgramRewriter``.  A case decides a plan
(plans.UserTransformation, the ``tx`` of the MakeTrainState the optimizers'
``_create`` decides; PerStepUserTransformation) that the pass's emitter
writes; the TODOs and report lines stay here.  (``optdef_facts.Plan`` is
the collectors' reading of a definition's class, not an emitter's plan.)"""

import os

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade.collectors import optimizer_defs as optdef_facts
from flaxlegacy.upgrade.collectors import programs as program_facts



class UserOptimizerRules:
  """User ``OptimizerDef`` subclasses: where they are, what they become."""

  def _plan(self, file_facts, name):
    """The ``optdef_facts.Plan`` of the user definition ``name`` of
    ``file_facts``, or why it is not translated."""
    plan = getattr(file_facts, 'optdef_plans', {}).get(name)
    if not isinstance(plan, optdef_facts.Plan):
      return plan or 'it is not a direct OptimizerDef subclass'
    subs = sorted(c for f in self.codebase.files.values()
                  for c, bases in getattr(f, 'class_bases', {}).items()
                  if name in bases)
    if subs:
      return (f'{subs[0]} derives from it (a function has no subclasses)')
    return plan

  def is_optimizer_state(self, node):
    """Whether ``node`` names legacy ``flax.optim.OptimizerState``."""
    name = cst_util.dotted(node) if isinstance(
        node, (cst.Name, cst.Attribute)) else None
    return program_facts.qualified(name, self.f.imports) in (
        'flax.optim.OptimizerState', 'flax.optim.base.OptimizerState')

  def _user_class(self, func):
    """(FileFacts, class name) of the user OptimizerDef ``func`` names --
    ``X`` of this file or imported by name, ``module.X`` of an imported
    file of the codebase -- or None."""
    if isinstance(func, cst.Name):
      if func.value in self.f.user_optdefs:
        return self.f, func.value
      full = self.f.imports.get(func.value, '')
      mod, _, cls = full.rpartition('.')
    elif isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
      mod, cls = self.f.imports.get(func.value.value, ''), func.attr.value
    else:
      return None
    if not mod:
      return None
    comps = mod.split('.')
    here = os.path.dirname(self.f.path)

    def common(path):  # how many trailing module names the path shares
      parts = os.path.splitext(path)[0].split(os.sep)
      n = 0
      while n < min(len(parts), len(comps)) and parts[-1 - n] == comps[-1 - n]:
        n += 1
      return n

    files = [f for p, f in self.codebase.files.items()
             if cls in getattr(f, 'user_optdefs', ()) and common(p)]
    files.sort(key=lambda f: (-common(f.path),
                              os.path.dirname(f.path) != here))
    return (files[0], cls) if files else None

  def _user_optdef(self, expr):
    """The user OptimizerDef class ``expr`` (a call of it) builds, or None."""
    if isinstance(expr, cst.Call):
      found = self._user_class(expr.func)
      if found is not None:
        return found[1]
    return None

  def _translated(self, expr):
    """The Plan of the user definition ``expr`` (a call) builds, if the
    upgrade translates it to a function returning optax, else None."""
    if not isinstance(expr, cst.Call):
      return None
    found = self._user_class(expr.func)
    if found is None:
      return None
    plan = self._plan(*found)
    return plan if isinstance(plan, optdef_facts.Plan) else None

  def _inject_user(self, original, updated, plan):
    """``optax.inject_hyperparams(UserDef, static_args=...)(...)``: the
    translated definition with its learning rate settable per step (every
    other parameter static, as legacy branched on them in Python)."""
    args = list(updated.args)
    if plan.var_args or 'learning_rate' not in plan.params or any(
        a.star for a in args):
      self.todo(original, f'{plan.name}(...): the program sets the learning '
                'rate per step, and this constructor has no learning_rate '
                'parameter given in a form optax.inject_hyperparams can set')
      return updated
    pos = [a for a in args if a.keyword is None]
    given = len(pos) > plan.params.index('learning_rate') or any(
        a.keyword is not None and a.keyword.value == 'learning_rate'
        for a in args)
    self.note(original, f'{plan.name}(...) -> optax.inject_hyperparams')
    return self.emit.per_step_user_transformation(
        plans.PerStepUserTransformation(
            updated, tuple(p for p in plan.params if p != 'learning_rate'),
            default_rate=not given))

  def _call_user_optimizer(self, original_node, updated_node):
    """``UserDef(...).create(target)`` / ``user_def.create(target)``; a
    translated ``UserDef(...)`` where the learning rate is set per step."""
    f = original_node.func
    # UserDef(...).create(target): the translated definition is the optax
    # transformation (rules/optimizer_defs.py); one kept stays, through
    # as_optax()
    if isinstance(f, cst.Attribute) and f.attr.value == 'create' and (
        self._user_optdef(f.value)):
      tx = plans.UserTransformation(updated_node.func.value, translated=bool(
          self._translated(f.value)))
      return self._create(original_node, None, 'Optimizer', tx=tx,
                          updated=updated_node) or updated_node
    if isinstance(f, cst.Attribute) and f.attr.value == 'create' and (
        isinstance(f.value, cst.Name)) and self.scope.lookup(
            'user_defs', f.value.value):
      tx = plans.UserTransformation(f.value, translated=self.scope.lookup(
          'user_defs', f.value.value) == 'translated')
      return self._create(original_node, None, 'Optimizer', tx=tx,
                          updated=updated_node) or updated_node
    # UserDef(...) of a translated definition, where the learning rate is
    # set per step: optax.inject_hyperparams around it
    plan = self._translated(original_node)
    if plan is not None and self.per_step_lr:
      return self._inject_user(original_node, updated_node, plan)
    return None
