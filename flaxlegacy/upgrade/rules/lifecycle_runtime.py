"""Rule: the legacy life cycle of a module class known only at run time.

A program that builds its model from a value holding one of several user
module classes of different parameters (``self.flax_module_def =
REGISTRY[name].partial(**hps)``, read in another file) cannot be given an
``M(...).init`` / ``M(...).apply`` the upgrade writes: which class, and so
which keywords are fields and which ``__call__`` arguments, only the run
can tell.  The call is carried to run time instead (flaxlegacy/migrate/
upgraded.py, shipped as ``legacy_helpers``):

* ``_, m = X.create(rng, *inputs, **kw)`` ->
  ``_, m = legacy_model.create_module(X, rng, *inputs, **kw)``: a
  ``Model`` that carries X (the keywords split by the class's fields at run
  time); every use of ``m`` stays as it is (called, ``.params``,
  ``.replace``, passed on: objects.model_carried says every place it
  reaches takes a carried model);
* ``X.create_by_shape`` -> ``legacy_model.create_module_by_shape``;
  ``X.init`` / ``X.init_by_shape`` -> ``legacy_model.init_module`` /
  ``init_module_by_shape`` (the parameters, as legacy);
* ``m.module.call`` of such a carried model (legacy ``Module.call(params,
  *inputs)``) -> ``legacy_model.module_call(m.module)``;
* a ``with nn.stateful(...) as s:`` block whose model calls or inits are
  of such carried models (and of nothing the program rules thread
  statically) -> ``with legacy_model.stateful(...) as s:``: those calls
  apply with the block's collections and write back what they change, as
  legacy's dynamic ``nn.stateful`` did; ``s`` is the dict of collections
  (``{'batch_stats': ...}``) the upgraded program's state is elsewhere.

Certainty: X must hold user legacy module classes only (flow.py: at least
two, each one the upgrade converts, of different parameters; no value the
source does not show).  Anything else keeps the program rules' TODO.

The cases decide plans (plans.RuntimeLifecycle, RuntimeStateful;
``m.module.call`` is the life cycle's ModuleFunction) that the program
pass's emitter (``rw.emit``) writes; the TODOs and report lines stay
here.
"""

import libcst as cst

from flaxlegacy.upgrade import flow as flow_lib
from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade.emit.linen import RUNTIME_LIFECYCLE  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.rules import objects

# the legacy life cycle calls carried to run time
LIFECYCLE_OPS = frozenset(('create', 'create_by_shape', 'init',
                           'init_by_shape'))
# index of the runtime flag in a programs.py ``_stateful`` entry
RUNTIME = 5


def runtime_module(rw, expr, attr=None):
  """Whether ``expr`` (in the file ``rw`` rewrites), used as a legacy
  module with ``attr``, holds user module classes known only at run time
  (objects.runtime_module_classes)."""
  vals = objects.values(rw.codebase, rw.f.path, rw._qual(), expr)  # pylint: disable=protected-access
  if not vals:
    return False
  vals = flow_lib.usable(vals, attr, getattr(rw.codebase, 'flow', None))
  return objects.runtime_module_classes(rw.codebase, vals)


def lifecycle_assign(rw, orig_call, new_call, target):
  """``target = X.<life cycle>(rng, ...)`` with a pair target and X known
  only at run time: its plans.RuntimeLifecycle, or None."""
  f = orig_call.func
  if not (isinstance(f, cst.Attribute) and f.attr.value in LIFECYCLE_OPS
          and isinstance(target, (cst.Tuple, cst.List))
          and len(target.elements) == 2 and orig_call.args
          and orig_call.args[0].keyword is None
          and not orig_call.args[0].star):
    return None
  if f.attr.value.startswith('create'):
    # the model it makes: carried where flow.py's site says so, which is
    # what every use of it reads (objects.model_carried)
    # (a model carried only because it goes beyond a function's locals
    # keeps the static create: programs.py writes legacy_model.Model)
    if not objects.created_carried(rw.codebase, ('mc', rw.f.path,
                                                 id(orig_call))):
      return None
  elif not (runtime_module(rw, f.value, f.attr.value) or _layers_init(
      rw, orig_call)):
    return None
  call = new_call if (isinstance(new_call, cst.Call) and len(
      new_call.args) == len(orig_call.args)) else orig_call
  mark_runtime(rw)
  rw.note(orig_call, f'X.{f.attr.value}(...) of module classes known at run '
          f'time -> legacy_model.{RUNTIME_LIFECYCLE[f.attr.value]}')
  return plans.RuntimeLifecycle(f.attr.value, f.value,
                                rw._decoded(call.args), target)  # pylint: disable=protected-access


def _layers_init(rw, call):
  """``X.init(rng, x)`` / ``X.init_by_shape(rng, specs)`` -- the inputs
  alone, no keyword -- of an X that holds legacy layers and user module
  classes known only at run time (objects.runtime_init_modules): the
  layer's value is its linen partial, so the run-time init is linen's.
  (With more arguments, which are a layer's inputs and which its
  hyper-parameters only legacy's signature could tell.)"""
  f = call.func
  if f.attr.value not in ('init', 'init_by_shape') or len(call.args) != 2 or (
      any(a.keyword is not None or a.star for a in call.args)):
    return False
  vals = objects.values(rw.codebase, rw.f.path, rw._qual(), f.value)  # pylint: disable=protected-access
  if not vals:
    return False
  vals = flow_lib.usable(vals, f.attr.value,
                         getattr(rw.codebase, 'flow', None))
  return objects.runtime_init_modules(rw.codebase, vals)


def mark_runtime(rw):
  """The innermost ``nn.stateful`` block holds a call carried to run
  time."""
  if rw._stateful:  # pylint: disable=protected-access
    st = rw._stateful[-1]  # pylint: disable=protected-access
    if st[4] == 'batch_stats':
      st[RUNTIME] = True


def carried_call(rw, call):
  """``m(...)`` / ``m.method(...)`` / ``m.module.call(...)`` of a model
  that carries its module: the innermost ``nn.stateful`` block must run at
  run time."""
  f = call.func
  # m(...), m.method(...), m.module.call(...): the model is the callee or
  # a prefix of its attribute chain
  while isinstance(f, (cst.Name, cst.Attribute)):
    if _carried(rw, f):
      mark_runtime(rw)
      return
    if isinstance(f, cst.Name):
      return
    f = f.value


def _carried(rw, expr):
  if isinstance(expr, cst.Name):
    return rw._carried_name(expr.value)  # pylint: disable=protected-access
  if isinstance(expr, cst.Attribute):
    ok, _ = objects.carried(rw.codebase, rw.f.path, rw._qual(), expr)  # pylint: disable=protected-access
    return ok
  return False


def runtime_block(rw, original_node, updated_node, handled, kept_items,
                  is_stateful, clean):
  """The ``with`` statement whose ``nn.stateful`` items become
  ``legacy_model.stateful``, or None: every such item's block carries a
  call to run time and none threads a call statically."""
  if not handled or not all(
      h[4] == 'batch_stats' and h[RUNTIME] and not h[3] for h in handled):
    return None
  rest = iter(kept_items)
  items = []
  for item, new_item in zip(original_node.items, updated_node.items):
    if is_stateful(item):
      items.append(new_item.with_changes(item=rw.emit.runtime_stateful(
          plans.RuntimeStateful(new_item.item))))
    else:
      items.append(next(rest))
  rw.note(original_node, 'nn.stateful around models carried to run time -> '
          'legacy_model.stateful')
  return updated_node.with_changes(items=clean(items))


def runtime_lifecycle(rw, call):
  """Whether the life cycle call ``call`` (``X.create(...)`` ...) is
  carried to run time (``lifecycle_assign`` rewrites it)."""
  f = call.func
  if f.attr.value.startswith('create'):
    return objects.created_carried(rw.codebase, ('mc', rw.f.path, id(call)))
  return runtime_module(rw, f.value, f.attr.value)


def module_call(rw, original, updated):
  """``m.module.call`` of a model that carries its module (legacy
  ``Module.call(params, *inputs)``, a class method of the module the model
  was made of) -> ``legacy_model.module_call(m.module)``: the same function
  of the parameters and inputs, applying the module known at run time.
  Returns the new node, or None."""
  inner = original.value
  if not (original.attr.value == 'call' and isinstance(inner, cst.Attribute)
          and inner.attr.value == 'module' and _carried(rw, inner.value)):
    return None
  rw.note(original, 'model.module.call of a model that carries its module '
          '-> legacy_model.module_call')
  return rw.emit.module_function(plans.ModuleFunction(updated.value))
