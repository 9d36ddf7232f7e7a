"""Raw ``jax.checkpoint`` / ``jax.remat`` / ``jax.vmap`` over a local
function of a module body, rewritten as linen's lifted transform.

Legacy bodies wrap a local function that reads ``self.param`` or builds
layers in a raw JAX transform (gfsa: ``inner_apply = jax.checkpoint(
inner_apply)``, ``jax.vmap(run_steps)(stacked)``).  Legacy Flax kept its
variables in Python dicts and made parameters in an eager context (spec
legacy-nn 2.15), so inside the transform it

* made each parameter once, from the shape it saw, unbatched: a parameter
  made inside ``jax.vmap`` is shared by every element (the oracle, flax
  0.3.6 on jax 0.4.13: ``w`` made in ``jax.vmap(f)(x[4, 3])`` has shape
  ``(3,)``);
* drew one key from ``nn.make_rng`` for the whole transform (the counter
  advances once, at trace time: every element of a vmap gets the same
  key, the same dropout mask);
* kept the names: no level is added to the parameter tree.

Linen cannot make or update variables inside a raw transform; its lifted
transforms take a function whose first argument is the module.  The rule
gives the function that argument, named ``self`` (so the body, which read
the body's ``self`` by closure, now reads the lifted module: its fields,
``self.param``, and the submodules it builds are bound to the lifted scope,
under the same names), passes ``self`` at every call, and lifts the
transform.  Each of these is a plan (plans.LiftedFunction, LiftedCall,
LiftedTransform, LiftedDecorator); the linen emitter writes

* ``jax.checkpoint(f)`` / ``jax.remat(f)`` -> ``nn.checkpoint(f)`` /
  ``nn.remat(f)`` (every collection and rng lifted, as legacy saw them);
* ``jax.vmap(f, in_axes, out_axes)`` -> ``nn.vmap(f,
  variable_axes={True: None}, split_rngs={True: False}, in_axes=...,
  out_axes=...)``: every collection broadcast (one copy, as legacy's
  dicts), every rng stream unsplit (one key, as legacy's counter); linen's
  ``in_axes`` do not count the module.

The transformed function is used as ``T(f)(args)`` (``T(f)(self,
args)``), as ``f = T(f)`` (the calls of ``f`` pass ``self``), or as a
value (``functools.partial(T(f), self)``: ``jax.lax.map(jax.vmap(f),
xs)``, whose ``lax.map`` keeps its TODO).

Only where that is certain; else the TODO of jax_transforms.py stays:

* a method's ``apply`` (a class body: its ``self``) whose auto-names are not
  counted on the run-time stack (autoname_stack.py: the stack checks the
  running module, which is the lifted copy inside the transform);
* ``f`` a local ``def`` (once, undecorated, or decorated with only
  ``@jax.remat`` / ``@jax.checkpoint``: written as linen's) or a lambda
  written in the transform, with no parameter named ``self``; every other mention of
  ``f`` in the body a call, a transform of this table, or ``f = T(f)``;
* the calls inside ``f`` (and the local functions it calls) that reach
  variables are ``self.param`` / ``self.get_param`` (``self.state`` /
  ``self.collection`` too under checkpoint, whose lifting takes every
  collection) and legacy layers or module classes built there; a shared
  instance, a held ``.partial``, a container of instances, a method of the
  class or a function of the codebase that builds submodules, or a local
  function that does (it reads the body's ``self``, not the lifted one),
  keeps the TODO;
* the transform's own arguments are ones linen's takes the same way
  (``prevent_cse`` / ``policy``; ``in_axes`` / ``out_axes`` /
  ``axis_name`` / ``axis_size``).

``jax.lax.map`` is not rewritten: ``nn.scan`` with broadcast parameters
runs the body an extra time at init (Python side effects, legacy
auto-name counters, would run twice).
"""

import collections

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade import walk

# qualified JAX name -> (linen's transform, its keywords in the order of
# the JAX positional parameters after the function, the keywords linen
# takes the same way)
LIFTS = {
    'jax.checkpoint': ('checkpoint', (), ('prevent_cse', 'policy')),
    'jax.ad_checkpoint.checkpoint': ('checkpoint', (),
                                     ('prevent_cse', 'policy')),
    'jax.remat': ('remat', (), ('prevent_cse', 'policy')),
    'jax.vmap': ('vmap', ('in_axes', 'out_axes', 'axis_name', 'axis_size'),
                 ('in_axes', 'out_axes', 'axis_name', 'axis_size')),
}
_READS = ('param', 'get_param')
_STATE = ('state', 'collection')
_SAFE_KINDS = ('layer', 'class')

# the rewrite of one body: ids of original nodes
Plan = collections.namedtuple(
    'Plan', 'transforms calls params partials')


class _Uses(walk.FastVisitor):
  """The transforms of LIFTS, the calls and the names in a body."""

  def __init__(self, lift_name):
    super().__init__()
    self.lift_name = lift_name
    self.transforms = []  # (Call, LIFTS key)
    self.calls = []
    self.names = collections.defaultdict(list)
    self.assigns = []  # Assign
    self.decorated = []  # (FunctionDef, LIFTS key): @jax.remat def f

  def visit_Call(self, node):
    self.calls.append(node)
    name = self.lift_name(node.func)
    if name is not None:
      self.transforms.append((node, name))

  def visit_Name(self, node):
    self.names[node.value].append(node)

  def visit_Assign(self, node):
    self.assigns.append(node)

  def visit_FunctionDef(self, node):
    if len(node.decorators) == 1:
      name = self.lift_name(node.decorators[0].decorator)
      if name is not None and LIFTS[name][0] != 'vmap':
        self.decorated.append((node, name))

  def visit_ClassDef(self, node):
    return False


def _param_names(params):
  return {p.name.value for p in cst_util.all_params(params)}


class LiftedTransformRules:
  """The plan (``Plan``) of the lifted rewrites of one module body, and
  their leave hooks; jax_transforms.py leaves out the TODO of a planned
  transform."""

  _lift_plan = None

  def _lift_name(self, func):
    name = self._transform_name(func)  # (jax_transforms.py's)
    return name if name in LIFTS else None

  def lift_plan(self):
    if self._lift_plan is None:
      self._lift_plan = self._make_lift_plan()
    return self._lift_plan

  def _make_lift_plan(self):
    plan = Plan({}, set(), set(), set())
    if getattr(self.info, 'kind', None) != 'class' or (
        self.stack_role is not None) or not any(
            full == 'jax' or full.startswith('jax.')
            for full in self.ctx.facts.imports.values()):
      return plan  # (no walk of a body whose file imports nothing of JAX)
    ps = list(self.fn.params.posonly_params) + list(self.fn.params.params)
    if not ps or ps[0].name.value != 'self':
      return plan
    uses = _Uses(self._lift_name)
    self.fn.body.visit(uses)
    # a local function (by name) or a lambda -> its transforms
    by_fn = collections.defaultdict(list)
    fns = {}
    for call, name in uses.transforms:
      f = self._lift_target(call, name)
      if f is None:
        continue
      key = f.value if isinstance(f, cst.Name) else id(f)
      fns[key] = f
      by_fn[key].append((call, name))
    called = {id(c.func): c for c in uses.calls}
    for key, transforms in by_fn.items():
      f = fns[key]
      if isinstance(f, cst.Lambda):
        fn = f
        direct = []
        assigned = set()
        if _param_names(fn.params) & {'self'}:
          continue
      else:
        found = self._lift_def(f, transforms, uses, called)
        if found is None:
          continue
        fn, direct, assigned = found
      if not self._submodule_call(fn, set()):
        continue  # a pure function: the raw transform runs as it is
      state_ok = all(LIFTS[n][0] != 'vmap' for _, n in transforms)
      if not self._liftable(fn, state_ok):
        continue
      plan.params.add(id(fn))
      plan.calls.update(id(c) for c in direct)
      for call, name in transforms:
        plan.transforms[id(call)] = name
        outer = called.get(id(call))
        if outer is not None:
          plan.calls.add(id(outer))
        elif id(call) not in assigned:
          plan.partials.add(id(call))
    for fdef, name in uses.decorated:
      direct = self._lift_decorated(fdef, uses, called)
      if direct is None or fdef.name.value in by_fn:
        continue
      if self._submodule_call(fdef, set()) and self._liftable(fdef, True):
        plan.params.add(id(fdef))
        plan.calls.update(id(c) for c in direct)
        plan.transforms[id(fdef.decorators[0])] = name
    return plan

  def _lift_decorated(self, fdef, uses, called):
    """The calls of ``@jax.remat def f`` (``fdef``) where every other
    mention of ``f`` in the body is one and ``f`` is defined once; else
    None."""
    if self._local_functions().defs.get(fdef.name.value) != [fdef] or (
        'self' in _param_names(fdef.params)):
      return None
    direct = []
    for n in uses.names[fdef.name.value]:
      if n is fdef.name:
        continue
      c = called.get(id(n))
      if c is None:
        return None
      direct.append(c)
    return direct

  def _lift_target(self, call, name):
    """The function ``call`` (a transform of LIFTS) transforms, a Name or
    a Lambda, where its arguments are ones linen takes; else None."""
    _, positional, keywords = LIFTS[name]
    pos = [a for a in call.args if a.keyword is None]
    if not pos or any(a.star for a in call.args):
      return None
    if len(pos) - 1 > len(positional):
      return None
    if any(a.keyword.value not in keywords
           for a in call.args if a.keyword is not None):
      return None
    f = pos[0].value
    return f if isinstance(f, (cst.Name, cst.Lambda)) else None

  def _lift_def(self, name, transforms, uses, called):
    """(FunctionDef, its direct calls, ids of the ``f = T(f)`` transforms)
    where every mention of the local function ``name`` in the body is a
    call, one of ``transforms`` or ``f = T(f)``; else None."""
    defs = self._local_functions().defs.get(name.value, [])
    mine = {id(c) for c, _ in transforms}
    fdefs = [d for d in defs if isinstance(d, cst.FunctionDef)]
    if len(fdefs) != 1 or fdefs[0].decorators:
      return None
    fdef = fdefs[0]
    if 'self' in _param_names(fdef.params):
      return None
    assigned = set()
    targets = set()
    for a in uses.assigns:
      for t in a.targets:
        if isinstance(t.target, cst.Name) and t.target.value == name.value:
          if len(a.targets) != 1 or id(a.value) not in mine:
            return None
          assigned.add(id(a.value))
          targets.add(id(t.target))
    if any(not isinstance(d, cst.FunctionDef) and id(d) not in assigned
           for d in defs):
      return None
    args = {id(c.args[0].value) for c, _ in transforms}
    direct = []
    for n in uses.names[name.value]:
      if n is fdef.name or id(n) in targets or id(n) in args:
        continue
      c = called.get(id(n))
      if c is None:
        return None  # another mention: handed on, shadowed ...
      direct.append(c)
    return fdef, direct, assigned

  def _liftable(self, fn, state_ok):
    """Whether every call in ``fn`` that reaches variables is one the
    lifted copy of the module makes the same (see the module doc)."""
    calls = []
    fn.body.visit(_CallsOf(calls))  # a def's block, a lambda's expression
    held = self._shared_containers()
    local = self._local_functions().defs
    for c in calls:
      f = c.func
      if (isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name)
          and f.value.value == 'self'):
        if f.attr.value in _READS or (state_ok and f.attr.value in _STATE):
          continue
        if f.attr.value in _STATE:
          return False
      if self._held_call(f, held):
        return False
      ref = self.resolver(f)
      if ref is not None and ref.kind in _SAFE_KINDS:
        continue
      if self._module_value(f):  # a shared instance, a held partial ...
        return False
      if isinstance(f, cst.Name) and f.value in local:
        for inner, _ in self._functions(f, set()):
          if self._submodule_call(inner, set()):
            return False
        continue
      if self._followed_call(f, set(), None):
        return False
    return True

  # -- leave hooks (the apply rewriter's) --
  def lifted_call(self, original, updated):
    """``updated`` (the rewritten call ``original``): a call of a planned
    function (the module passed first) or a planned transform, each
    decided as a plan the emitter writes."""
    plan = self.lift_plan()
    if not plan.transforms and not plan.calls:
      return updated
    if not isinstance(updated, cst.Call):
      return updated
    if id(original) in plan.calls:
      updated = self.emit.lifted_call(plans.LiftedCall(call=updated))
    name = plan.transforms.get(id(original))
    if name is None:
      return updated
    lifted, positional, _ = LIFTS[name]
    pos = [a for a in updated.args if a.keyword is None]
    args = tuple(plans.Hyper(k, a) for a, k in zip(pos[1:], positional))
    args += tuple(plans.Hyper(a.keyword.value, a) for a in updated.args
                  if a.keyword is not None)
    self.rewrote(original, 'lifted_transform',
                 f'{name} -> linen\'s {lifted} (the function takes the '
                 'module first)')
    return self.emit.lifted_transform(plans.LiftedTransform(
        transform=lifted, function=pos[0].value, args=args,
        value=id(original) in plan.partials))

  def lifted_decorator(self, original, updated):
    """``@jax.remat`` / ``@jax.checkpoint`` of a planned function, as
    its plan."""
    name = self.lift_plan().transforms.get(id(original))
    if name is None:
      return updated
    lifted = LIFTS[name][0]
    self.rewrote(original, 'lifted_transform',
                 f'@{name} -> linen\'s {lifted} (the function takes the '
                 'module first)')
    return updated.with_changes(decorator=self.emit.lifted_decorator(
        plans.LiftedDecorator(transform=lifted)))

  def lifted_params(self, original, updated):
    """A planned function (FunctionDef or Lambda), taking the module."""
    if id(original) not in self.lift_plan().params:
      return updated
    return self.emit.lifted_function(plans.LiftedFunction(function=updated))


class _CallsOf(walk.FastVisitor):

  def __init__(self, out):
    super().__init__()
    self.out = out

  def visit_Call(self, node):
    self.out.append(node)

  def visit_ClassDef(self, node):
    return False
