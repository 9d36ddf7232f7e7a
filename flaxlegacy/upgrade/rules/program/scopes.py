"""Scopes of the program pass: which names hold what, per function.

``Scope`` is one function's bindings (kinds, apply functions, optimizer
definitions, ...), chained to the enclosing one.  ``ScopeRules`` is the
mixin of ``programs.ProgramRewriter`` holding the hooks that track them:
class and function definitions (a function's parameters, by what the
codebase passes them and by the legacy examples' names; the classes the
pass enters: not legacy module bodies, a user ``OptimizerDef`` only where
it is translated) and assignments (what each assigned call makes).
"""

import libcst as cst

from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade.collectors import optimizer_defs as optdef_facts
from flaxlegacy.upgrade.collectors.programs import LIFECYCLE  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.collectors.programs import TX_RULES  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.rules import lifecycle_runtime
from flaxlegacy.upgrade.rules import objects
from flaxlegacy.upgrade.rules import optimizer_defs
from flaxlegacy.upgrade.rules.program.shared import MODEL  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.rules.program.shared import MODEL_PARAM_NAMES  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.rules.program.shared import OPT  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.rules.program.shared import OPT_PARAM_NAMES  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.rules.program.shared import USER_OPTDEF  # pylint: disable=g-importing-member


class Scope:

  def __init__(self, parent=None):
    self.parent = parent
    self.kinds = {}
    self.apply_of = {}  # model name -> its apply function (plans.ApplyFn)
    self.state_of = {}  # model name -> optimizer name it came from
    self.optdefs = {}  # name -> legacy optimizer class (value now optax)
    self.modvars = set()  # names bound to X.partial(...) of a legacy module
    # names bound to optim.ModelParamTraversal(f) -> that call
    self.traversals = {}
    self.user_defs = {}  # names bound to a user OptimizerDef instance
    # names bound to a TrainState made of a target not known to be a
    # parameter tree (apply_fn not known either)
    self.bare_states = {}

  def kind(self, name):
    s = self
    while s is not None:
      if name in s.kinds:
        return s.kinds[name]
      s = s.parent
    # The legacy examples' naming convention, for values that come from
    # functions the pass does not follow.
    if name in OPT_PARAM_NAMES:
      return OPT
    if name in MODEL_PARAM_NAMES:
      return MODEL
    return None

  def has(self, name):
    """Whether a scope here decided ``name``'s kind (None included)."""
    s = self
    while s is not None:
      if name in s.kinds:
        return True
      s = s.parent
    return False

  def lookup(self, table, name):
    if table == 'modvars_':
      s = self
      while s is not None:
        if name in s.modvars:
          return True
        s = s.parent
      return False
    s = self
    while s is not None:
      d = getattr(s, table)
      if name in d:
        return d[name]
      s = s.parent
    return None

  def any_optimizer(self):
    s = self
    while s is not None:
      for n, k in s.kinds.items():
        if k == OPT:
          return n
      s = s.parent
    return None


class ScopeRules:
  """The scope-tracking hooks (class, function, assignment)."""

  def visit_ClassDef(self, node):
    self._quals.append(node.name.value)
    # legacy module bodies are the module rules' (rules/modules.py); a
    # user-written optimizer definition becomes a function returning an
    # optax transformation (rules/optimizer_defs.py), or stays with a TODO
    if node.name.value in self.f.user_optdefs:
      plan = self._plan(self.f, node.name.value)
      if isinstance(plan, optdef_facts.Plan):
        return True  # its methods' bodies get the program rules too
      self.todo(node, USER_OPTDEF.format(node.name.value, plan))
      return False
    return node.name.value not in self.f.modules

  def leave_ClassDef(self, original_node, updated_node):
    self._quals.pop()
    plan = (self._plan(self.f, original_node.name.value)
            if original_node.name.value in self.f.user_optdefs else None)
    if not isinstance(plan, optdef_facts.Plan):
      return updated_node
    self.note(original_node, f'{plan.name}(OptimizerDef) -> a function '
              'returning an optax GradientTransformation')
    return optimizer_defs.convert(self, original_node, updated_node, plan)

  def visit_FunctionDef(self, node):
    self._quals.append(node.name.value)
    if node.name.value in self.f.modules:
      return False
    self.scope = Scope(self.scope)
    ps = node.params
    plist = list(ps.posonly_params) + list(ps.params) + list(ps.kwonly_params)
    opt_in_scope = self.scope.any_optimizer()
    for i, p in enumerate(plist):
      n = p.name.value
      # what the codebase passes it (flow.py): an optimizer whatever its
      # name; one in some runs and something else in others: a TODO
      kind, why, unknown = objects.param_kind(
          self.codebase, self.f.path, self._qual(), n, self.model_class)
      if why:
        self.todo(node, f'parameter {n!r}: {why}; the upgrade rewrites '
                  'a legacy object only where every value agrees: port this '
                  'function by hand')
        self.scope.kinds[n] = None  # not by its name either
        continue
      if kind == 'optimizer' and (not unknown or n in OPT_PARAM_NAMES):
        self.scope.kinds[n] = OPT
        continue
      if kind == objects.CARRIED:
        # a legacy_model.Model: its calls stay as they are
        self.scope.kinds[n] = None
        continue
      if kind == 'optimizer':
        # an optimizer from the codebase's calls, something unknown from
        # others: neither rewritten as a TrainState nor left silently
        self.todo(node, f'parameter {n!r}: it holds a legacy optimizer in '
                  'the calls the codebase makes, and values the upgrade '
                  'cannot see in others; port this function by hand')
        self.scope.kinds[n] = None
        continue
      src = self.f.loss_fns.get(node.name.value)
      if (src is not None and i == 0 and src.isidentifier()
          and self.scope.parent.kind(src) != OPT):
        self.scope.kinds[n] = None  # not a model by its name either
        continue  # the optimizer it is differentiated at stays legacy
      if n in OPT_PARAM_NAMES:
        self.scope.kinds[n] = OPT
      elif n in MODEL_PARAM_NAMES or (node.name.value in self.f.loss_fns
                                      and i == 0):
        self.scope.kinds[n] = MODEL
        if node.name.value in self.f.loss_fns:
          # the TrainState whose params the loss is differentiated at (read
          # when the loss runs, after the enclosing function bound it)
          self.scope.state_of[n] = self.f.loss_fns[node.name.value]
    return True

  def leave_FunctionDef(self, original_node, updated_node):
    self._quals.pop()
    if original_node.name.value in self.f.modules:
      return updated_node
    self.scope = self.scope.parent
    return updated_node

  def _kept_definitions(self):
    """objects.kept_definitions for this file (computed once)."""
    if self._kept_defs is None:
      self._kept_defs = objects.kept_definitions(self.codebase, self.f.path,
                                                 self.model_class)
    return self._kept_defs

  def visit_Assign(self, node):
    v = node.value
    self._assign_values.add(id(v))
    if (self._kept_definitions() and len(node.targets) == 1
        and isinstance(node.targets[0].target, cst.Name)
        and isinstance(v, cst.Call) and (self._qual(),
                                          node.targets[0].target.value)
        in self._kept_defs):
      self._kept_def_calls.add(id(v))
    if (len(node.targets) == 1 and isinstance(node.targets[0].target,
                                              cst.Name)
        and isinstance(v, cst.Call) and isinstance(v.func, (cst.Name,
                                                            cst.Attribute))
        and self.is_optim(v.func) in TX_RULES):
      self.scope.optdefs[node.targets[0].target.value] = self.is_optim(v.func)
    if (len(node.targets) == 1 and isinstance(node.targets[0].target,
                                              cst.Name)
        and self._user_optdef(v)):
      # True: translated (the name holds an optax transformation now)
      self.scope.user_defs[node.targets[0].target.value] = (
          'translated' if self._translated(v) else 'kept')
    if (len(node.targets) == 1 and isinstance(node.targets[0].target,
                                              cst.Name)
        and isinstance(v, cst.Call) and isinstance(v.func, (cst.Name,
                                                            cst.Attribute))
        and self.is_optim(v.func) == 'ModelParamTraversal'):
      self.scope.traversals[node.targets[0].target.value] = v
      self._optdef_values.add(id(v))
    if (len(node.targets) == 1 and isinstance(node.targets[0].target,
                                              cst.Name)
        and isinstance(v, cst.Call) and isinstance(v.func, cst.Attribute)
        and v.func.attr.value == 'partial'
        and self._is_module_expr(v.func.value)):
      self.scope.modvars.add(node.targets[0].target.value)
    if (len(node.targets) == 1 and isinstance(node.targets[0].target,
                                              cst.Name)
        and isinstance(v, cst.Call) and isinstance(v.func, cst.Name)
        and v.func.value in self.f.partial_helpers):
      self.scope.modvars.add(node.targets[0].target.value)
    targets = [t.target for t in node.targets]
    if len(targets) != 1:
      return True
    t = targets[0]
    if isinstance(t, cst.Name):
      k = self.kind_of(v)
      if k:
        self.scope.kinds[t.value] = k
        if k == MODEL and isinstance(v, cst.Attribute):
          self.scope.state_of[t.value] = self.ctx.code_of(v.value)
      if isinstance(v, cst.Call) and self.is_nn(v.func, 'Model'):
        self.scope.kinds[t.value] = MODEL
        self.scope.apply_of[t.value] = self._model_apply_fn(v)
    if isinstance(v, cst.Call):
      self._builder_call(t, v)
    if isinstance(t, (cst.Tuple, cst.List)) and isinstance(v, cst.Call):
      fn = v.func
      names = [e.value.value if isinstance(e.value, cst.Name) else None
               for e in t.elements]
      if isinstance(fn, cst.Attribute) and fn.attr.value in LIFECYCLE and (
          not lifecycle_runtime.runtime_lifecycle(self, v)):
        if len(names) == 2 and names[1]:
          self.scope.kinds[names[1]] = MODEL
          self.scope.apply_of[names[1]] = plans.ApplyFn(
              module=self._decoded_module(fn.value))
      if isinstance(fn, cst.Attribute) and fn.attr.value == 'optimize' and (
          self.kind_of(fn.value) == OPT) and names and names[0]:
        self.scope.kinds[names[0]] = OPT
    return True

  def leave_Assign(self, original_node, updated_node):
    # x = opt_def.create(target) of a target not known to be parameters
    if id(original_node.value) in self._bare_creates and len(
        original_node.targets) == 1 and isinstance(
            original_node.targets[0].target, cst.Name):
      self.scope.bare_states[original_node.targets[0].target.value] = True
    return updated_node

