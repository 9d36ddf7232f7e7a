"""Raw JAX transforms over submodule calls in a module body.

Legacy bodies ran ``jax.lax.scan(step, carry, xs)`` (``jax.vmap``,
``jax.remat``, ``lax.fori_loop`` ...) over a function -- a local ``def``, a
lambda, a ``functools.partial`` -- that calls legacy layers, modules or
shared instances: legacy Flax kept its parameters in Python dicts, so the
trace saw plain arrays.  Linen's variables live in scopes that a raw JAX
transform must not create or write inside its trace (``UnexpectedTracerError``
/ ``JaxTransformError`` at run time); linen has lifted transforms for that
(``nn.scan``, ``nn.vmap``, ``nn.remat`` ...).  The calls inside are
rewritten like any other, and the transform gets a TODO naming the lifted
transform to use: a rewrite to ``nn.scan`` depends on how the carry, the
scanned axes and the variables line up, which the source does not say.

The function is followed where the source says what it is: a local
function of the body (and the local functions it calls), and, through the
value facts (flow.py), a module-level function of the codebase (this file
or another one it imports) or a method of the class (``self._block``),
and the functions and methods those call in turn.  Inside a followed
function a call is a submodule call when the facts say it calls a legacy
layer or module class, ``self.param`` / ``self.state`` ... of the method,
or a parameter a ``functools.partial`` of the body bound to a submodule
(``partial(run_block, blk)``); a call the facts cannot tell (an
``unknown`` value) is not.

A transform over a function that calls no submodule (a pure function)
stays silent.  ``TRANSFORMS`` is the one table of transforms.  A raw
``jax.checkpoint`` / ``jax.remat`` / ``jax.vmap`` over a local function
that lifted_transforms.py rewrites as linen's lifted transform gets no
TODO.
"""

import collections
import functools
import itertools

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import walk
from flaxlegacy.upgrade.rules import jax_names

# qualified JAX name -> (what linen offers instead, where the transformed
# functions are among the arguments: positions, keywords)
TRANSFORMS = {
    'jax.lax.scan': ('nn.scan', (0,), ('f',)),
    'jax.lax.map': ('nn.scan (or nn.vmap)', (0,), ('f',)),
    'jax.lax.fori_loop': ('nn.scan (or nn.while_loop)', (2,), ('body_fun',)),
    'jax.lax.while_loop': ('nn.while_loop', (0, 1), ('cond_fun', 'body_fun')),
    'jax.lax.cond': ('nn.cond', (1, 2), ('true_fun', 'false_fun')),
    'jax.lax.switch': ('nn.switch', (1,), ('branches',)),
    'jax.vmap': ('nn.vmap', (0,), ('fun',)),
    'jax.pmap': ('nn.vmap inside, jax.pmap of the whole apply outside', (0,),
                 ('fun',)),
    'jax.jit': ('nn.jit', (0,), ('fun',)),
    'jax.remat': ('nn.remat', (0,), ('fun',)),
    'jax.checkpoint': ('nn.remat', (0,), ('fun',)),
    'jax.ad_checkpoint.checkpoint': ('nn.remat', (0,), ('fun',)),
    'jax.grad': ('nn.grad', (0,), ('fun',)),
    'jax.value_and_grad': ('nn.value_and_grad', (0,), ('fun',)),
    'jax.jvp': ('nn.jvp', (0,), ('fun',)),
    'jax.vjp': ('nn.vjp', (0,), ('fun',)),
    'jax.jacfwd': ('nn.jvp', (0,), ('fun',)),
    'jax.jacrev': ('nn.vjp', (0,), ('fun',)),
    'jax.hessian': ('nn.grad', (0,), ('fun',)),
    'jax.custom_vjp': ('nn.custom_vjp', (0,), ('fun',)),
    'jax.custom_jvp': ('nn.custom_vjp', (0,), ('fun',)),
}
# the legacy spelling of lax.cond with operands between the functions:
# cond(pred, true_operand, true_fun, false_operand, false_fun)
_OLD_COND = (2, 4)
_SELF_VARIABLES = ('param', 'state', 'get_param', 'collection')
# what the resolver (rules/resolver.py) calls a submodule to call
_MODULE_KINDS = ('layer', 'class', 'partial', 'shared', 'instance',
                 'attention')
# a function of the codebase followed from the body: its flow.py scope,
# whether it is a method, the parameters a functools.partial of the body
# bound to submodules
_Followed = collections.namedtuple('_Followed', 'rel qual is_method bound')


def transform_name(func, imports):
  """The TRANSFORMS key ``func`` (an expression) names, or None."""
  q = jax_names.qualify(func, imports)
  if q is None:
    return None
  q = jax_names.RENAMES.get(q, q)
  if q.startswith('jax.api.'):
    q = 'jax.' + q[len('jax.api.'):]
  return q if q in TRANSFORMS else None


def _functions_of(call, name):
  """The expressions ``call`` (of the transform ``name``) passes as the
  functions it transforms."""
  _, positions, keywords = TRANSFORMS[name]
  pos = [a.value for a in call.args if a.keyword is None and not a.star]
  if name == 'jax.lax.cond' and len(pos) == 5:
    positions = _OLD_COND
  out = [pos[i] for i in positions if i < len(pos)]
  out += [a.value for a in call.args
          if a.keyword is not None and a.keyword.value in keywords]
  return out


class _Locals(walk.FastVisitor):
  """The body's local functions by name: ``def f``, ``f = lambda ...``,
  ``f = functools.partial(g, ...)`` / ``f = jax.remat(g)`` (an
  expression to follow), and decorated defs."""

  def __init__(self):
    super().__init__()
    self.defs = {}  # name -> [FunctionDef | Lambda | expression]
    self.decorated = []  # (Decorator, FunctionDef)

  def visit_FunctionDef(self, node):
    self.defs.setdefault(node.name.value, []).append(node)
    for d in node.decorators:
      self.decorated.append((d, node))

  def visit_Assign(self, node):
    if len(node.targets) == 1 and isinstance(node.targets[0].target,
                                             cst.Name):
      if isinstance(node.value, (cst.Lambda, cst.Call)):
        self.defs.setdefault(node.targets[0].target.value, []).append(
            node.value)

  def visit_ClassDef(self, node):
    return False


class _Calls(walk.FastVisitor):
  """The calls inside a function."""

  def __init__(self):
    super().__init__()
    self.calls = []

  def visit_Call(self, node):
    self.calls.append(node)

  def visit_ClassDef(self, node):
    return False


class JaxTransformRules:
  """A TODO on a raw JAX transform whose function calls submodules."""

  _transform_locals = None

  def _local_functions(self):
    if self._transform_locals is None:
      scan = _Locals()
      self.fn.body.visit(scan)
      self._transform_locals = scan
    return self._transform_locals

  def _codebase_functions(self, values, bound=frozenset()):
    """(FunctionDef, _Followed) for the functions and methods of the
    codebase among ``values`` (flow.py values of an expression)."""
    flow = getattr(self.ctx.codebase, 'flow', None)
    out = []
    for v in values or ():
      if v[0] in ('func', 'boundmethod') and (v[1], v[2]) in flow.defs:
        d = flow.defs[(v[1], v[2])]
        if d.is_lambda:
          continue  # (a named lambda: not a FunctionDef)
        out.append((d.node, _Followed(v[1], v[2], d.is_method, bound)))
    return out

  def _bound_modules(self, partial, fn, method):
    """The parameters of ``fn`` (a FunctionDef of the codebase; ``method``:
    a method, bound: its self is not among them) that
    ``functools.partial(fn, ...)`` (``partial``, in this body) binds to a
    submodule of the body (a shared instance, a module reference)."""
    ps = fn.params
    pos = [p.name.value for p in list(ps.posonly_params) + list(ps.params)]
    pos = pos[1:] if method else pos
    out = set()
    i = 0
    for a in partial.args[1:]:
      if a.star:
        break
      if a.keyword is not None:
        name = a.keyword.value
      else:
        name = pos[i] if i < len(pos) else None
        i += 1
      if name is not None and self._module_value(a.value):
        out.add(name)
    return frozenset(out)

  def _transform_name(self, func):
    """The TRANSFORMS key ``func`` (an expression of this body) names, or
    None (for lifted_transforms.py)."""
    return transform_name(func, self.ctx.facts.imports)

  def _module_value(self, expr):
    """Whether ``expr`` (in this body) holds a submodule to call."""
    ref = self.resolver(expr)
    return ref is not None and ref.kind in _MODULE_KINDS

  def _functions(self, expr, seen, where=None):
    """The functions ``expr`` denotes: (FunctionDef | Lambda, where), with
    ``where`` None for a function of this body, a ``_Followed`` for one of
    the codebase (a module-level function, a method of the class, through
    the value facts, flow.py) and the lambdas inside it."""
    if id(expr) in seen:
      return []
    seen.add(id(expr))
    if isinstance(expr, (cst.Lambda, cst.FunctionDef)):
      return [(expr, where)]
    if where is None and isinstance(expr, cst.Name) and (
        expr.value in self._local_functions().defs):
      out = []
      for d in self._local_functions().defs[expr.value]:
        out += self._functions(d, seen)
      return out
    if isinstance(expr, (cst.Name, cst.Attribute)):
      return self._codebase_functions(self._values(expr, where))
    if isinstance(expr, (cst.List, cst.Tuple)):  # lax.switch's branches
      out = []
      for e in expr.elements:
        out += self._functions(e.value, seen, where)
      return out
    if isinstance(expr, cst.Call):
      imports = self._imports(where)
      q = jax_names.qualify(expr.func, imports)
      if q == 'functools.partial' and expr.args:
        out = self._functions(expr.args[0].value, seen, where)
        if where is None:  # partial(f, block): f's ``block`` a submodule
          out = [(f, w._replace(bound=self._bound_modules(expr, f,
                                                          w.is_method)))
                 if w is not None and isinstance(f, cst.FunctionDef)
                 else (f, w) for f, w in out]
        return out
      name = transform_name(expr.func, imports)
      if name is not None:  # jax.lax.scan(jax.remat(step), ...)
        out = []
        for f in _functions_of(expr, name):
          out += self._functions(f, seen, where)
        return out
    return []

  def _imports(self, where):
    if where is None:
      return self.ctx.facts.imports
    f = self.ctx.codebase.files.get(where.rel)
    return f.imports if f is not None else {}

  def _values(self, expr, where):
    """flow.py's values of ``expr``, in this body (``where`` None) or in
    the followed function ``where``; None without codebase facts."""
    if where is None:
      return self.flow_values(expr)
    flow = getattr(self.ctx.codebase, 'flow', None)
    return None if flow is None else flow.values_of(where.rel, where.qual,
                                                    expr)

  def _submodule_call(self, fn, seen, where=None):
    """A description of a call in ``fn`` that linen turns into a variable
    access (a submodule call, ``self.param`` ...), following the local
    functions it calls and the functions and methods of the codebase it
    calls (``where``: see ``_functions``); None if there is none."""
    if id(fn) in seen:
      return None
    seen.add(id(fn))
    if where is not None:
      return self._followed_submodule_call(fn, seen, where)
    calls = _Calls()
    fn.body.visit(calls)  # a def's block, a lambda's expression
    held = self._shared_containers()
    for c in calls.calls:
      f = c.func
      code = self.ctx.code_of(f)
      if (isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name)
          and f.value.value == 'self' and f.attr.value in _SELF_VARIABLES):
        return code
      local = isinstance(f, cst.Name) and (
          f.value in self._local_functions().defs)
      if local:
        for inner, _ in self._functions(f, set()):
          found = self._submodule_call(inner, seen)
          if found:
            return found
      if self._held_call(f, held):
        return code
      ref = self.resolver(f)
      if ref is not None and ref.kind in _MODULE_KINDS:
        return code
      if not local:
        found = self._followed_call(f, seen, None)
        if found:
          return f'{code}: {found}'
    return None

  def _followed_call(self, func, seen, where):
    """What a call of ``func`` (a function or method of the codebase)
    builds (see ``_submodule_call``), or None."""
    for inner, w in self._functions(func, set(), where):
      found = self._submodule_call(inner, seen, w)
      if found:
        return found
    return None

  def _followed_submodule_call(self, fn, seen, where):
    """``_submodule_call`` of a function of the codebase outside this body
    (``where``): its calls read through the value facts (flow.py): a
    legacy layer or module class, ``self.param`` ... of a method, a
    parameter ``functools.partial`` bound to a submodule, and the
    functions and methods it calls in turn."""
    code = functools.partial(cst_util.code, module=self._module_of(where))
    self_name = None
    if where.is_method:  # (a lambda inside the method: the method's self)
      d = self.ctx.codebase.flow.defs[(where.rel, where.qual)]
      ps = list(d.node.params.posonly_params) + list(d.node.params.params)
      self_name = ps[0].name.value if ps else None
    calls = _Calls()
    fn.body.visit(calls)
    for c in calls.calls:
      f = c.func
      if (self_name and isinstance(f, cst.Attribute)
          and isinstance(f.value, cst.Name) and f.value.value == self_name
          and f.attr.value in _SELF_VARIABLES):
        return code(f)
      if isinstance(f, cst.Name) and f.value in where.bound:
        return code(f)
      values = self._values(f, where) or ()
      if any(v[0] in ('layer', 'class') for v in values):
        return code(f)
      found = self._followed_call(f, seen, where)
      if found:
        return f'{code(f)}: {found}'
    return None

  def _module_of(self, where):
    flow = getattr(self.ctx.codebase, 'flow', None)
    return flow.modules.get(where.rel) if flow is not None else None

  def _module_itself(self, expr):
    """The code of ``expr`` if it denotes a module (a submodule handed to
    the transform as its function: ``jax.vmap(layer)``), else None."""
    if isinstance(expr, (cst.Lambda, cst.FunctionDef)):
      return None
    if self._held_call(expr, self._shared_containers()):
      return self.ctx.code_of(expr)
    ref = self.resolver(expr)
    if ref is not None and ref.kind in _MODULE_KINDS:
      return self.ctx.code_of(expr)
    return None

  def _transformed(self, name, functions, node):
    if id(node) in self.lift_plan().transforms:
      return  # linen's lifted transform (rules/apply/lifted_transforms.py)
    for f in functions:
      candidates = itertools.chain(
          [(f, self._module_itself(f))],
          ((fn, self._submodule_call(fn, set(), where))
           for fn, where in self._functions(f, set())))
      for fn, found in candidates:
        if found:
          lifted = TRANSFORMS[name][0]
          what = ('a submodule' if fn is f and not isinstance(
              f, (cst.Lambda, cst.FunctionDef))
                  else 'a function that calls a submodule')
          self.todo(node, f'{name} over {what} '
                    f'({found}): linen cannot create or update variables '
                    'inside a raw JAX transform (UnexpectedTracerError / '
                    f'JaxTransformError at run time); use linen\'s lifted '
                    f'{lifted}, or call the submodule outside the transform')
          return

  def _check_jax_transform(self, node):
    """``visit_Call``: a TODO on ``node`` if it is a transform (TRANSFORMS)
    of a function that calls a submodule."""
    name = transform_name(node.func, self.ctx.facts.imports)
    if name is not None:
      self._transformed(name, _functions_of(node, name), node)
      return
    q = jax_names.qualify(node.func, self.ctx.facts.imports)
    if q == 'functools.partial' and node.args:
      # decorator form: @functools.partial(jax.vmap, in_axes=0)
      inner = transform_name(node.args[0].value, self.ctx.facts.imports)
      if inner is not None and node.args[0].keyword is None and any(
          id(d.decorator) == id(node)
          for d, _ in self._local_functions().decorated):
        fns = [f for d, f in self._local_functions().decorated
               if id(d.decorator) == id(node)]
        self._transformed(inner, fns, node)

  def _check_jax_decorator(self, node):
    """``visit_Decorator``: ``@jax.remat`` / ``@jax.jit`` on a local
    function of the body."""
    name = transform_name(node.decorator, self.ctx.facts.imports)
    if name is not None:
      fns = [f for d, f in self._local_functions().decorated if d is node]
      self._transformed(name, fns, node)

