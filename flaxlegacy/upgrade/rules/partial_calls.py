"""Rule: a local of a plain function that holds ``L.partial(...)`` and is
called like a legacy module.

Helpers that a legacy ``apply`` calls build submodules too::

    def activation(x, train, name=''):
      batch_norm = nn.BatchNorm.partial(use_running_average=not train,
                                        momentum=0.9)
      x = batch_norm(x, name=name)       # a submodule of the caller
      return jax.nn.relu(x)

Outside module bodies ``L.partial(...)`` becomes ``functools.partial(L,
...)`` (rules/modules.py); the call must change with it, or ``x`` lands in
the partial's first field.  The two are rewritten together:
``batch_norm(name=name)(x)`` (linen parents a module made in a function
called from a compact method to that method's module, as legacy did), where

* the local is assigned once, ``L.partial(...)`` of a legacy layer;
* every call of it has one input (positional arguments after it are the
  layer's parameters in legacy order), keywords the layer knows, an
  explicit ``name=`` (an auto-name counts the caller's other submodules,
  which a helper cannot see), and no ``*`` / ``**``.

Otherwise the partial and each call get a TODO and stay as they are.  A
local only passed on (``conv=conv``) or called with keywords only is not
this rule's.
"""

import libcst as cst

from flaxlegacy.upgrade import layer_table
from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade import walk

TODO = ('{name} holds a legacy {what}.partial and is called like a legacy '
        'module ({name}(x, ...)): {why}; port the partial and its calls '
        'together by hand ({name} = functools.partial(L, ...); '
        "{name}(name=...)(x))")


class LocalsScan(walk.FastVisitor):
  """Assignments and calls of the names of one function (not nested);
  rules/recurrent.py walks nested functions too."""

  def __init__(self):
    self.assigns = {}  # name -> [value node or None]
    self.calls = {}  # name -> [call node]
    self._depth = 0

  def visit_FunctionDef(self, node):
    self._depth += 1
    return self._depth == 1

  def leave_FunctionDef(self, node):
    self._depth -= 1

  def visit_ClassDef(self, node):
    return False

  def visit_Assign(self, node):
    for t in node.targets:
      if isinstance(t.target, cst.Name):
        self.assigns.setdefault(t.target.value, []).append(node.value)
      else:
        for n in walk.target_names(t.target):
          self.assigns.setdefault(n, []).append(None)

  def visit_AugAssign(self, node):
    for n in walk.target_names(node.target):
      self.assigns.setdefault(n, []).append(None)

  def visit_For(self, node):
    for n in walk.target_names(node.target):
      self.assigns.setdefault(n, []).append(None)

  def visit_Call(self, node):
    if isinstance(node.func, cst.Name):
      self.calls.setdefault(node.func.value, []).append(node)


def _legacy_form(call):
  """Called like a legacy module: an input given positionally."""
  return any(a.keyword is None and not a.star for a in call.args)


def _call_plan(layer, call):
  """(ctor keyword args [(keyword, value)], input) or (None, why)."""
  if any(a.star for a in call.args):
    return None, 'a call with * / ** arguments'
  pos = [a for a in call.args if a.keyword is None]
  kws = [a for a in call.args if a.keyword is not None]
  if len(pos) - 1 > len(layer.params):
    return None, 'more positional arguments than the layer has'
  ctor = [(layer.params[i], a.value) for i, a in enumerate(pos[1:])]
  for a in kws:
    k = a.keyword.value
    if k != 'name' and k not in layer.params:
      return None, f'{k}= is not a parameter of legacy {layer.legacy}'
    ctor.append((k, a.value))
  keys = [k for k, _ in ctor]
  if len(set(keys)) != len(keys):
    return None, 'a parameter given twice'
  if 'name' not in keys:
    return None, ('no name=: the legacy auto-name counts the submodules '
                  'of the calling module, which this function cannot see')
  for k in keys:
    if (layer.legacy, k) in layer_table.UNSUPPORTED_ARGS:
      return None, layer_table.UNSUPPORTED_ARGS[(layer.legacy, k)]
  return (ctor, pos[0].value), None


def scan(up, fn, resolver):
  """``{id(node): ('todo', why) | ('call', plan)}`` for the partials and
  calls of the partial locals of plain function ``fn``."""
  s = LocalsScan()
  fn.visit(s)
  out = {}
  for name, calls in s.calls.items():
    legacy_calls = [c for c in calls if _legacy_form(c)]
    values = s.assigns.get(name, [])
    if not legacy_calls or not values:
      continue
    refs = [resolver(v) if v is not None else None for v in values]
    partials = [(v, r) for v, r in zip(values, refs)
                if r is not None and r.kind == 'partial']
    if not partials:
      continue
    inner = partials[0][1].target
    what = (f'nn.{inner.target.legacy}' if inner.kind == 'layer'
            else up.ctx.code_of(partials[0][0].func.value))
    why = None
    pargs = partials[0][0].args
    if len(values) != 1:
      why = 'it is assigned more than once'
    elif inner.kind != 'layer':
      why = ('only partials of legacy layers are rewritten with their '
             'calls')
    elif any(a.keyword is None or a.star for a in pargs):
      why = 'the partial has positional or * / ** arguments'
    elif any((inner.target.legacy, a.keyword.value)
             in layer_table.UNSUPPORTED_ARGS for a in pargs):
      why = 'the partial binds an argument linen has no counterpart for'
    plans = {}
    if why is None:
      for c in legacy_calls:
        plan, why = _call_plan(inner.target, c)
        if plan is None:
          break
        plans[id(c)] = plan
    if why is not None:
      msg = TODO.format(name=name, what=what, why=why)
      for v, _ in partials:
        out[id(v)] = ('todo', msg)
      for c in legacy_calls:
        out[id(c)] = ('todo', msg)
      continue
    for c in legacy_calls:
      out[id(c)] = ('call', (inner.target, plans[id(c)]))
  return out


def rewrite_call(up, original, updated, layer, plan):
  """``n(x, a, k=v, name=s)`` as a PartialCall plan (the call made a
  submodule with its hyper-parameters, called on ``x``): the values from
  the updated call (other rules may have rewritten inside them)."""
  ctor, _ = plan
  by_orig = {id(a.value): u for a, u in zip(original.args, updated.args)}
  pos = [a for a in original.args if a.keyword is None]
  up.rewrote(original, 'partial_calls', f'{original.func.value}(x, ...) '
             f'on a local partial of nn.{layer.legacy} -> '
             f'{original.func.value}(...)(x)')
  return up.emit.partial_call(plans.PartialCall(
      callee=updated.func, layer=layer,
      hypers=tuple(plans.Hyper(k, by_orig[id(v)]) for k, v in ctor),
      input=by_orig[id(pos[0].value)].value))
