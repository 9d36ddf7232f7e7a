"""Legacy auto-names of submodules built in plain functions and lambdas.

Legacy Flax numbered an unnamed submodule on the counter of the module
whose ``apply`` was running when it was built, also where a plain function
called from the body built it (init2winit's vgg ``features()``, a
``conv = nn.Conv.partial(...)`` called in a loop) or a lambda made in one
module and called in another (cold_posterior's ``get_activation_f``
returns ``lambda x, **kw: activations.BiasSELUNorm(x, ...)``, handed to
the blocks and called there: the block's counter).  Linen binds such a
module to the running compact method too, but names it by its own
per-class counter.

The upgrade writes a run-time stack of counters (``autoname_frame`` /
``autoname_counter`` of flaxlegacy/migrate/upgraded.py, shipped in the
tree's one ``legacy_helpers.py``): each compact method whose run can reach
such code is decorated ``@legacy_names.autoname_frame`` (a fresh counter
per call, popped in ``finally``) and counts all its auto-names from that
counter (``legacy_autoname = legacy_names.autoname_counter()``), and the
functions and lambdas name ``f'{Class}_{next(legacy_names.
autoname_counter())}'``, read when the submodule is built.  The shipped
counter raises where the running module is not the frame's owner (a body
this analysis did not mark), so no name is guessed.

This module is the codebase-wide analysis (from the value facts, flow.py),
made once before any file is rewritten (``codebase.analyses.
autoname_stack()`` keeps it; rules/autoname_stack.py reads it for the
rules, and says what they write):

* stack functions: top-level functions every call of which is in a module
  body (rules/layer_functions.py's condition) that build unnamed legacy
  submodules, call a stack function that does, or hold a lambda that
  does; rules/layer_functions.py rewrites them drawing from the stack;
* frame bodies: module bodies (``apply`` of a class, an ``@nn.module``
  function, their nested defs) with a call that can reach such code (a
  stack function that builds, a value that can hold a lambda where one of
  the codebase's rewritten lambdas builds), or holding such a lambda.

A function reached from code that is not a module body keeps its TODOs.
"""

import builtins

import libcst as cst

from flaxlegacy.upgrade import flow as flow_lib
from flaxlegacy.upgrade import walk
from flaxlegacy.upgrade.analyses import call_names
from flaxlegacy.upgrade.analyses import function_callers

_BUILTINS = frozenset(dir(builtins))


class _Calls(walk.ScopedVisitor):
  """Every call of a module, with its scope (flow.py's qualified name of
  the innermost def) and whether it is inside a lambda."""

  def __init__(self):
    super().__init__()
    self.lambdas = []  # the open Lambda nodes
    self.calls = []  # (qual, call, innermost lambda or None)

  def visit_Lambda(self, node):
    self.lambdas.append(node)

  def leave_Lambda(self, node):
    self.lambdas.pop()

  def visit_Call(self, node):
    self.calls.append(('.'.join(self.quals), node,
                       self.lambdas[-1] if self.lambdas else None))


class Analysis:
  """``functions``: (rel, name) of the stack functions; ``bodies``: (rel,
  qual) of the frame bodies (``Cls.apply`` / the ``@nn.module``
  function)."""

  def __init__(self):
    self.functions = set()
    self.bodies = set()


def _body_of(codebase, rel, qual):
  """The module body (its qual) that scope ``qual`` of ``rel`` is or is
  nested in, or None."""
  f = codebase.files.get(rel)
  if f is None or not qual:
    return None
  parts = qual.split('.')
  if len(parts) >= 2 and parts[1] == 'apply':
    info = f.modules.get(parts[0])
    if info is not None and info.kind == 'class':
      return '.'.join(parts[:2])
  info = f.modules.get(parts[0])
  if info is not None and info.kind == 'function':
    return parts[0]
  return None


def _top_function(flow, rel, qual):
  """The top-level plain function that scope ``qual`` is or is nested in,
  or None."""
  if not qual:
    return None
  name = qual.split('.')[0]
  d = flow.defs.get((rel, name))
  if d is None or d.is_method:
    return None
  return name


def analyse(codebase):
  """The Analysis of ``codebase`` (worked out again at each call: read it
  as ``codebase.analyses.autoname_stack()``)."""
  out = Analysis()
  flow = getattr(codebase, 'flow', None)
  if flow is None or codebase.names_mode != 'legacy':
    return out
  calls = []  # (rel, qual, call, lambda or None, values)
  for rel, module in flow.modules.items():
    f = codebase.files.get(rel)
    if f is None or not (f.nn_prefixes or codebase.modules):
      continue
    v = _Calls()
    module.visit(v)
    for qual, call, lam in v.calls:
      values = flow_lib.usable(flow.expr_values(rel, qual, call.func) or (),
                               None, flow)
      calls.append((rel, qual, call, lam, values))

  none_params = {}  # (rel, qual) -> its None-default parameters, once

  def maybe_none(rel, qual, lam):
    out = none_params.get((rel, qual))
    if out is None:
      d = flow.defs.get((rel, qual))
      out = none_params[(rel, qual)] = call_names.none_default_params(
          d.node if d is not None else None)
    return out | call_names.none_default_params(lam) if lam is not None else out

  def builds(call, values, rel, qual, lam):
    """A legacy submodule built by ``call`` that may be auto-named."""
    return (call_names.name_kind(call, maybe_none(rel, qual, lam)) != 'named'
            and any(a.keyword is None and not a.star for a in call.args)
            and any(v[0] in ('layer', 'class') for v in values))

  def maybe_lambda(call, values):
    f = call.func
    if isinstance(f, cst.Name) and f.value in _BUILTINS:
      return False  # range, len, ...: a builtin, not a lambda
    # (a lambda bound to a name in a function is a 'func' of the facts)
    return any(v[0] == 'function' or v[0] == 'func' and getattr(
        flow.defs.get((v[1], v[2])), 'is_lambda', False) for v in values)

  candidates = {(rel, qual) for (rel, qual) in flow.defs
                if '.' not in qual
                and function_callers.candidate(codebase, rel, qual)}
  # the candidates whose run builds (directly or through another), and the
  # lambdas that build
  building = set()
  lambdas = {}  # id(Lambda) -> (rel, the scope qual)
  for rel, qual, call, lam, values in calls:
    if lam is not None:
      if builds(call, values, rel, qual, lam):
        lambdas[id(lam)] = (rel, qual)
      continue
    top = _top_function(flow, rel, qual)
    if (rel, top) in candidates and builds(call, values, rel, qual, lam):
      building.add((rel, top))
  changed = True
  while changed:
    changed = False
    for rel, qual, call, lam, values in calls:
      top = _top_function(flow, rel, qual)
      if lam is not None or (rel, top) not in candidates or (
          (rel, top) in building):
        continue
      if any(v[0] == 'func' and (v[1], v[2]) in building for v in values):
        building.add((rel, top))
        changed = True
  # lambdas that are rewritten: in a stack function or a module body
  live_lambdas = False
  for rel, qual in lambdas.values():
    top = _top_function(flow, rel, qual)
    if (rel, top) in candidates:
      out.functions.add((rel, top))
      live_lambdas = True
    body = _body_of(codebase, rel, qual)
    if body is not None:
      out.bodies.add((rel, body))
      live_lambdas = True
  out.functions |= building
  for rel, qual, call, lam, values in calls:
    body = _body_of(codebase, rel, qual)
    if body is None:
      continue
    if any(v[0] == 'func' and (v[1], v[2]) in building for v in values) or (
        live_lambdas and maybe_lambda(call, values)):
      out.bodies.add((rel, body))
  return out
