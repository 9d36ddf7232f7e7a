"""``ApplyRewriter``: the rewriter of one legacy ``apply`` body (or
``@nn.module`` function body); rules/modules.py documents what it rewrites.

It is a file's ``Upgrader`` (rules/rewriter.py: imports, removed JAX names,
``X.partial`` outside module bodies ...) plus what only a module body has:
its fields read as ``self.<field>``, the locals holding module references
(``_LocalScan``, rules/partial_locals.py), the legacy auto-name plan
(rules/name_plan.py, rules/linen_names.py), and the calls of legacy layers,
modules, ``self.param`` / ``self.state``, randomness and instances.

The call cases are one mixin per legacy concept, each in its own module of
``rules/apply/`` (issue 24's "one rule per legacy concept"):

* ``instances.py``: ``X.partial`` held by a local called once, ``X.shared``,
  ``.partial`` / ``.shared`` inside a body, shared instances called
  through containers (``blocks[i](x)``);
* ``jax_transforms.py``: a TODO on a raw JAX transform (``jax.lax.scan``
  ...) over a function that calls submodules (tried in ``visit_Call``);
* ``lifted_transforms.py``: a raw ``jax.checkpoint`` / ``jax.vmap`` over a
  local function that reads parameters or builds layers, written as
  linen's lifted one where that is certain (``leave_Call``, the leave
  hooks of the function);
* ``stochastic.py``: ``nn.make_rng``, ``nn.is_stochastic``, ``nn.dropout``;
* ``self_methods.py``: ``self.param``, ``self.state``, ``self.is_stateful``;
* ``module_calls.py``: calls of what the callee resolves to (legacy layers
  and modules: construct + call, auto-names, ``**`` splats);
* ``frozen_fields.py``: dict fields in a pytree map, read unfrozen.

libcst calls one ``leave_Call``: it tries the cases of
``FIRST_CALL_CASES`` (forms the file's generic rules must not see), then
the file's rules (``Upgrader.leave_Call``), then ``CALL_CASES``, in exactly
the order the single body tried them before the split; a case answers None
when the call is not its form, and the next one is tried.  Mixins rather
than delegation, as in rules/program/: the cases read and update one
rewriter's state, and the rules outside (attention.py, recurrent.py,
drivers.py ...) take the rewriter itself.  The ``.partial`` helpers both
rewriters use are rules/partials.py's, the constructor helpers
rules/constructors.py's, ``Resolver`` rules/resolver.py's.

The cases decide and the rewriter's emitter writes: a case that rewrites
builds a plan (upgrade/plans.py: a dropout, a parameter, a submodule call,
an instance, its auto-name ...) and returns ``self.emit.<kind>(plan)``,
the emitter of the file's target (upgrade/emit/; ``self.emit`` is set by
``Upgrader``).  TODOs and report entries stay the cases'.
"""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import flow as flow_lib
from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade import walk
from flaxlegacy.upgrade.rules import _shared
from flaxlegacy.upgrade.rules import attention
from flaxlegacy.upgrade.rules import attention_cache
from flaxlegacy.upgrade.rules import autoname_stack
from flaxlegacy.upgrade.rules import constructors
from flaxlegacy.upgrade.rules import drivers
from flaxlegacy.upgrade.rules import linen_names
from flaxlegacy.upgrade.rules import name_plan
from flaxlegacy.upgrade.rules import stochastic_names
from flaxlegacy.upgrade.rules import partial_locals
from flaxlegacy.upgrade.rules.apply import frozen_fields
from flaxlegacy.upgrade.rules.apply import instances
from flaxlegacy.upgrade.rules.apply import jax_transforms
from flaxlegacy.upgrade.rules.apply import lifted_transforms
from flaxlegacy.upgrade.rules.apply import module_calls
from flaxlegacy.upgrade.rules.apply import self_methods
from flaxlegacy.upgrade.rules.apply import stochastic
from flaxlegacy.upgrade.rules.resolver import Resolver  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.rules.rewriter import Upgrader  # pylint: disable=g-importing-member


class _LocalScan(walk.FastVisitor):
  """Local variables bound to module references (one body)."""

  def __init__(self, resolver):
    self.resolver = resolver
    self.vars = {}
    self.assigned = set()

  def visit_Assign(self, node):
    for t in node.targets:
      for n in walk.target_names(t.target):
        self.assigned.add(n)
    if len(node.targets) == 1 and isinstance(node.targets[0].target,
                                             cst.Name):
      name = node.targets[0].target.value
      ref = self.resolver(node.value)
      if name in self.vars and self.vars[name] != ref:
        self.vars[name] = None
      else:
        self.vars[name] = ref

  def visit_AugAssign(self, node):
    self.assigned.update(walk.target_names(node.target))

  def visit_AnnAssign(self, node):
    self.assigned.update(walk.target_names(node.target))

  def visit_For(self, node):
    self.assigned.update(walk.target_names(node.target))

  def visit_CompFor(self, node):
    self.assigned.update(walk.target_names(node.target))

  def visit_AsName(self, node):
    self.assigned.update(walk.target_names(node.name))

  def visit_Param(self, node):
    self.assigned.add(node.name.value)



class _InLoops(walk.FastVisitor):
  """The ids of the calls inside a loop or a comprehension."""

  def __init__(self):
    self.ids = set()
    self._depth = 0

  def _enter(self, node):  # pylint: disable=unused-argument
    self._depth += 1

  def _leave(self, node):  # pylint: disable=unused-argument
    self._depth -= 1

  visit_For = visit_While = visit_CompFor = _enter
  leave_For = leave_While = leave_CompFor = _leave

  def visit_Call(self, node):
    if self._depth:
      self.ids.add(id(node))


class ApplyRewriter(instances.InstanceRules, jax_transforms.JaxTransformRules,
                    lifted_transforms.LiftedTransformRules,
                    stochastic.StochasticRules,
                    self_methods.SelfMethodRules,
                    module_calls.ModuleCallRules,
                    frozen_fields.FrozenFieldRules, Upgrader):
  """Rewrites one ``apply`` body (or ``@nn.module`` function body): the
  concept mixins of rules/apply/, and the hooks they share."""

  PLAIN_BODIES = False  # resolves its locals itself

  plan_class = name_plan.NamePlan  # rules/methods.py expands helper-method calls

  def __init__(self, up, info, fn):
    super().__init__(up.ctx)
    self.info = info
    self.fn = fn
    # flow.py scope of the body (the class's leave has left its scope)
    outer = list(getattr(up, '_quals', []))
    if info.kind == 'function' and outer[-1:] == [info.name]:
      outer.pop()  # a plain function's (rules/layer_functions.py): in it
    self._quals = outer + (
        [info.name, 'apply'] if info.kind == 'class' else [info.name])
    self.fields = set(info.fields) | ({info.var_kw} if info.var_kw else set())
    # parameters whose default is None: ``name=p`` may auto-name
    self.maybe_none = _shared.none_default_params(fn)
    self.resolver = Resolver(self, {})
    self.resolver.flow_names = False
    for _ in range(4):  # to a fixpoint: ``B = A.partial(...)``, A local
      scan = _LocalScan(self.resolver)
      fn.body.visit(scan)
      found = {k: v for k, v in scan.vars.items() if v is not None}
      if found.keys() == self.resolver.locals.keys():
        break
      self.resolver.locals = found
    self.resolver.flow_names = True
    self.assigned_fields = sorted(self.fields & scan.assigned)
    self._skip_names = set()
    # locals holding X.partial(...) or a module from outside (wmt's embed)
    self.instance_locals = partial_locals.find(fn.body, self.resolver,
                                               self.resolver.locals)
    for name, (pref, _, _, _) in self.instance_locals.items():
      self.resolver.locals[name] = _shared.Ref('instance', pref.target, None)
    plan = self.plan_class(self.resolver, self.resolver.locals)
    fn.body.visit(plan)
    # a body whose run can reach a function or lambda that builds auto-named
    # submodules counts all of its own from the frame's counter, in legacy
    # order; such a function draws from the running body's counter
    # (rules/autoname_stack.py)
    self.stack_role = autoname_stack.role(up, info, fn)
    self._lambdas = 0  # the depth of lambdas being rewritten
    if self.stack_role is not None and not plan.dynamic:
      plan.dynamic = True
      plan.static_prefix = 0
    self.dynamic = plan.dynamic
    self.names = None
    self.used_dynamic = False
    self.instance_partials = {}  # id(X.partial call) -> legacy name or None
    for name, (pref, values, call, _) in self.instance_locals.items():
      type_name = name_plan.type_name(pref)
      if plan.dynamic:
        legacy = self._counted_instance(plan, values, call, type_name)
      else:
        legacy = partial_locals.legacy_name(plan.events, call, type_name)
      for v in values:
        self.instance_partials[id(v)] = (name, legacy)
    if not plan.dynamic:
      self.names = name_plan.plan_names(plan.events, plan.nested_ids)
      if self.names is None:
        self.dynamic = True
    # --names linen (rules/linen_names.py): linen's own auto-names where
    # they are known statically; the legacy plan above otherwise
    self.rename = None
    if up.ctx.codebase.names_mode == 'linen':
      self.rename = linen_names.plan(self, plan, fn)
    if self.dynamic and plan.nested:
      self.todo_all = ('auto-named submodules inside the arguments of other '
                       'auto-named submodules, under a loop or condition: '
                       'check the names')
    else:
      self.todo_all = None
    self._cache_calls = set()  # ids of cache.store / cache.retrieve funcs

  # -- names that are not loads --
  def visit_Attribute(self, node):
    super().visit_Attribute(node)
    self._skip_names.add(id(node.attr))
    if (isinstance(node.value, cst.Name) and node.value.value in self.fields
        and node.attr.value in ('retrieve', 'store', 'as_dict')
        and id(node) not in self._cache_calls):
      self.todo(node, f'{node.value.value!r} is a legacy nn.Collection '
                'argument: port it to a linen variable collection by hand')

  def visit_Arg(self, node):
    if node.keyword is not None:
      self._skip_names.add(id(node.keyword))

  def visit_Param(self, node):
    self._skip_names.add(id(node.name))

  def visit_ImportAlias(self, node):
    return False

  def visit_Decorator(self, node):
    self._check_jax_decorator(node)
    return True

  def leave_Decorator(self, original_node, updated_node):
    return self.lifted_decorator(original_node, updated_node)

  def leave_Name(self, original_node, updated_node):
    if id(original_node) in self._skip_names:
      return updated_node
    stochastic_names.leave_name(self, original_node)
    v = original_node.value
    if v in self.fields and v not in self.assigned_fields:
      return cst.Attribute(value=cst.Name('self'), attr=cst.Name(v))
    return updated_node

  # -- calls --
  def visit_Call(self, node):
    super().visit_Call(node)
    self._check_jax_transform(node)
    if attention_cache.module_call_shape(self, node):
      self._cache_calls.add(id(node.func))
    ref = self.resolver(node.func)
    attention.visit_call(self, node, ref)
    if ref is not None:
      self._handled.add(id(node.func))
      root = constructors.partial_root(ref) if ref.kind == 'partial' else ref
      if root.kind == 'class':  # a legacy layer for a wrapper to drive
        drivers.layer_values(self, node, root.target)
    f = node.func
    if isinstance(f, cst.Attribute) and f.attr.value in ('partial', 'shared'):
      if self.resolver(f.value) is not None:
        self._handled.add(id(f))
        self._handled.add(id(f.value))
    name = cst_util.legacy_attr(f, self.ctx.facts.nn_prefixes)
    if name in ('make_rng', 'is_stochastic'):
      self._handled.add(id(f))
    elif stochastic_names.called_attr(self, node):  # make_rng() by name
      self._skip_names.add(id(f))
    if (isinstance(f, cst.Attribute) and f.attr.value == 'is_initializing'
        and isinstance(f.value, cst.Name) and f.value.value == 'self'
        and getattr(self.info, 'name', None) in
        self.ctx.codebase.shared_classes):
      self.todo(node, f'{self.info.name} is used as a shared module: legacy '
                'is_initializing() is False in the second and later calls of '
                'a shared instance during init, linen\'s is True in all of '
                'them (spec legacy-nn trap 21): check this branch')
    return True


  def leave_Call(self, original_node, updated_node):
    # a raw jax.checkpoint / jax.vmap written as linen's lifted one, and
    # the calls of its function passing the module (lifted_transforms.py)
    return self.lifted_call(original_node,
                            self._leave_call(original_node, updated_node))

  def _leave_call(self, original_node, updated_node):
    for case in FIRST_CALL_CASES:
      new = case(self, original_node, updated_node)
      if new is not None:
        return new
    updated_node = self._unfrozen_tree_args(original_node, updated_node)
    updated = super().leave_Call(original_node, updated_node)
    if updated is not updated_node:
      return updated
    for case in CALL_CASES:
      new = case(self, original_node, updated_node)
      if new is not None:
        return new
    return updated_node

  def holds_none(self, expr):
    """Whether ``expr`` (an original node, or None) is None in every run:
    the literal, or a parameter / field every call of the codebase leaves
    at (or sets to) None (flow.py)."""
    if expr is None:
      return False
    if isinstance(expr, cst.Name) and expr.value == 'None':
      return True
    if isinstance(expr, cst.Attribute) and isinstance(
        expr.value, cst.Name) and expr.value.value == 'self':
      expr = expr.attr  # a field read as self.f in the legacy source
    values = self.flow_values(expr)
    return values is not None and values == frozenset({flow_lib.NONE})

  def _counted_instance(self, plan, values, call, type_name):
    """In a body that counts its auto-names at run time: the name (a
    plans.AutoName drawing from the counter) of a ``X.partial`` held by a
    local and called once, where its call comes before the first auto-name
    only the run can count (a value of several classes) and its
    construction draws the same number: every earlier auto-named call
    written before it, the call after it.  Else None."""
    prefix = plan.events[:plan.static_prefix or 0]
    if partial_locals.legacy_name(prefix, call, type_name) is None:
      return None
    index = [e[0] for e in prefix].index(id(call))
    def at(node):
      return self.ctx.line(node)
    starts = [at(v) for v in values]
    earlier = [at(plan.nodes[e[0]]) for e in prefix[:index]]
    if None in starts + earlier or at(call) is None:
      return None
    if not all(max(earlier, default=0) < s < at(call) for s in starts):
      return None
    looped = _InLoops()
    self.fn.body.visit(looped)
    if any(id(v) in looped.ids for v in values):
      return None  # constructed more than once
    self.used_dynamic = True
    return plans.AutoName(counter=self.counter_src(), type_name=type_name)

  def _auto_name_plan(self, original, ref_type_name, ctor_src):
    """The name to add for an auto-named call (a plans.AutoName), or
    None."""
    if self.dynamic:
      counter = self.counter_src()
      if counter == _shared.AUTONAME_VAR:
        self.used_dynamic = True
      if ref_type_name is None:
        if ctor_src is None:
          return None
        return plans.AutoName(counter=counter, ctor_src=ctor_src)
      return plans.AutoName(counter=counter, type_name=ref_type_name)
    name = self.names.get(id(original))
    if name is None:
      return None
    return plans.AutoName(literal=name)

  def counter_src(self):
    """The source of the auto-name counter a construction here draws from:
    the body's ``legacy_autoname``, or, in a stack function or a lambda of
    a stack-counted body, the running body's
    (``legacy_names.autoname_counter()``, read when it is built)."""
    if self.stack_role == 'function' or (
        self.stack_role is not None and self._lambdas):
      self.ctx.needed_imports.add(autoname_stack.IMPORT)
      return autoname_stack.COUNTER
    return _shared.AUTONAME_VAR

  def visit_Lambda(self, node):
    self._lambdas += 1
    return True

  def leave_Lambda(self, original_node, updated_node):
    self._lambdas -= 1
    return self.lifted_params(original_node, updated_node)

  def leave_FunctionDef(self, original_node, updated_node):
    updated = super().leave_FunctionDef(original_node, updated_node)
    if isinstance(updated, cst.FunctionDef):
      return self.lifted_params(original_node, updated)
    return updated

  def construction(self, plan, node):
    """``node``, the emitter's text of the submodule construction ``plan``
    (a SubmoduleCall or Instance), recorded for the rules that read the
    written bodies' constructions by their plans (rules/module_methods.py
    setup form)."""
    self.ctx.constructions[id(node)] = (node, plan)
    return node


def _cache_call(rw, original_node, updated_node):
  """``cache.store`` / ``cache.retrieve`` of the legacy attention cache
  (rules/attention_cache.py), else None."""
  if id(original_node.func) in rw._cache_calls:  # pylint: disable=protected-access
    return attention_cache.module_call(rw, original_node, updated_node)
  return None


# pylint: disable=protected-access
# The cases of a call in a module body, in the order they are tried (the
# first answer that is not None wins).  First those the file's generic
# rules (Upgrader.leave_Call) must not see:
FIRST_CALL_CASES = (
    instances.InstanceRules._call_instance_partial,
    _cache_call,
    # P.init / P.call of a module class held by a parameter
    drivers.life_cycle_call,
)
# then, after the file's rules left the call as it was (frozen_fields.py
# having read dict fields unfrozen), the body's own; the last,
# ``_call_callee``, always answers:
CALL_CASES = (
    stochastic.StochasticRules._call_rng,
    self_methods.SelfMethodRules._call_self_method,
    instances.InstanceRules._call_instance_attr,
    instances.InstanceRules._call_partial_or_shared,
    instances.InstanceRules._call_shared_container,
    module_calls.ModuleCallRules._call_callee,
)
# pylint: enable=protected-access
