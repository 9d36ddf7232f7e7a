"""``@nn.module_method``: extra entry points of a legacy module class.

Legacy Flax let a class expose methods besides ``apply`` with
``@nn.module_method`` (legacy vae's ``VAE.generate``, wmt's
``Transformer.encode`` / ``decode``).  Called on a model
(``model.generate(z)``), such a method ran like ``apply``: the module's
``.partial`` keyword arguments were passed to it, and the submodules it
built with the names ``apply`` used (``Decoder.shared(name='decoder')``)
found ``apply``'s parameters.

Linen allows one ``@nn.compact`` method per class; other methods reach
submodules that ``setup`` defines.  So:

* each module method gets the body rewrite ``apply`` gets (legacy layer
  calls -> construct + call, ``self.param`` ...), loses its decorator, and
  loses the parameters that are fields of the class (legacy passed the
  module's hyper-parameters to it; the fields hold them now);
* every submodule a module method builds (directly or through a helper
  method it calls) moves to ``setup`` under its legacy name
  (``self.decoder = Decoder(name='decoder')``), and every place of the
  class that built it, ``__call__`` included, uses that one instance;
* the program calls it with ``module.apply(variables, ..., method='m')``
  (rules/programs.py).

Where no such setup plan is certain (a submodule built without a literal
name, from a value only the method knows -- an input, a local such as an
embedding shared under a condition --, or with other arguments than
``__call__`` gives it), ``__call__`` and the module methods keep building
their submodules inline: their bodies move to private methods
(``_call_body``, ``_encode_body`` ...) that the public methods run through
one ``@nn.compact`` method (``_legacy_scope``), so whichever runs builds its
submodules under the legacy names and finds the parameters ``__call__``
made, as legacy module methods did.

A method parameter that is a field whose default differs from ``apply``'s
(wmt's ``encode(..., train=True)`` beside ``apply(..., train=False)``)
stays a parameter of the method with its own default when no ``.partial``
of the class binds it (legacy used the method's default then); when one
does, it becomes the field and gets a TODO (a constructor that leaves it
unbound gives the field apply's default).

Left as it was, with a TODO naming the reason: a class that also defines
``setup``, a method that assigns one of its field parameters.

Which form, which submodules, under which names, is decided here; the
class's new pieces are plans (upgrade/plans.py: ``ModuleMethod``,
``Setup`` / ``SubmoduleAttr``, ``SharedScope`` / ``ScopedMethod``) that
the rewriter's emitter writes (``up.emit``).  The submodules a body
builds are read from the plans the body rules decided for them
(``SubmoduleCall`` / ``Instance``, recorded with the node the emitter
wrote in ``ctx.constructions``), not from the written text: their
literal names, the values they are built from, and whether two places
build the same (the same legacy parameters bound to the same
expressions, however spelled).  Only constructors written by rules whose
concept is not split into plans yet (legacy attention) are still found
by resolving the written call.
"""

import copy
import dataclasses
import keyword

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade import walk
from flaxlegacy.upgrade.rules import _shared
from flaxlegacy.upgrade.rules import apply_rewriter
from flaxlegacy.upgrade.rules import helpers
from flaxlegacy.upgrade.rules import resolver as resolver_lib


def find(up, node):
  """The ``@nn.module_method`` FunctionDefs of a legacy class node."""
  out = []
  for stmt in node.body.body:
    if isinstance(stmt, cst.FunctionDef) and any(
        cst_util.legacy_attr(d.decorator, up.ctx.facts.nn_prefixes)
        == 'module_method' for d in stmt.decorators):
      out.append(stmt)
  return out


def _name_kw(call):
  for a in call.args:
    if a.keyword is not None and a.keyword.value == 'name':
      return a.value
  return None


def _literal(value):
  return value.evaluated_value if isinstance(value, cst.SimpleString) else None


def _plan_name(plan):
  """The literal name a construction plan gives its submodule (the
  user's ``name=``, or the legacy auto-name added), or None."""
  for h in plan.hypers:
    if h.key == 'name':
      return _literal(h.arg.value)
  if plan.name is not None:
    return plan.name.literal
  return None


def _plan_args(plan):
  """The user's expressions a construction plan builds from (its
  hyper-parameters, a catch-all's values), then -- a SubmoduleCall's --
  the inputs it is called with."""
  out = [h.arg.value for h in plan.hypers]
  if getattr(plan, 'catch_all', None) is not None:
    out += [v for _, v in plan.catch_all[1]]
  return out, [a.value for a in getattr(plan, 'inputs', ())]


def _plan_key(plan):
  """What a construction plan builds, to compare two places that build a
  submodule under one name: the module, and each hyper-parameter's legacy
  parameter and expression (not their spelling; the name is the one
  compared)."""
  code = cst_util.code
  layer = plan.layer
  return (type(plan).__name__, code(plan.module.expr),
          None if layer is None else layer.legacy, plan.module.shipped,
          plan.module.user_subclass, getattr(plan, 'direct_layer', None),
          tuple((h.key, code(h.arg.value)) for h in plan.hypers
                if h.key != 'name'),
          tuple((k, code(v)) for k, v in (
              plan.catch_all[1] if getattr(plan, 'catch_all', None) else ())))


class _Sites(walk.FastVisitor):
  """Submodule constructions in one function: those a rule decided as a
  plan (``ctx.constructions``: the plan, read through its arguments), and
  -- written by a rule whose concept is not split into plans yet -- calls
  of a constructor (``is_ctor``) in the written text."""

  def __init__(self, constructions, is_ctor):
    self.constructions = constructions
    self.is_ctor = is_ctor
    # (node, plan or None, literal name or None, the user's expressions
    # it is built from)
    self.sites = []

  def _construction(self, node):
    built = self.constructions.get(id(node))
    if built is None or built[0] is not node:
      return False
    plan = built[1]
    hypers, inputs = _plan_args(plan)
    self.sites.append((node, plan, _plan_name(plan), hypers))
    for v in hypers + inputs:  # constructions inside its arguments
      v.visit(self)
    return True

  def visit_Name(self, node):
    self._construction(node)

  def visit_Call(self, node):
    if self._construction(node):
      return False
    if self.is_ctor(node.func):
      n = _name_kw(node)
      self.sites.append((node, None, _literal(n),
                         [a.value for a in node.args]))
    return None


class _Replace(walk.FastTransformer):
  """The hoisted constructions -> the submodules setup built."""

  def __init__(self, up, constructions, attrs):
    self.up = up
    self.constructions = constructions
    self.attrs = attrs  # id(construction node) -> setup attribute

  def _replaced(self, plan):
    """``plan`` with the constructions in its arguments replaced (None:
    none there)."""
    changed = False
    hypers = []
    for h in plan.hypers:
      v = walk.transform(h.arg.value, self)
      changed |= v is not h.arg.value
      hypers.append(plans.Hyper(h.key, h.arg.with_changes(value=v))
                    if v is not h.arg.value else h)
    inputs = []
    for a in getattr(plan, 'inputs', ()):
      v = walk.transform(a.value, self)
      changed |= v is not a.value
      inputs.append(a.with_changes(value=v) if v is not a.value else a)
    if not changed:
      return None
    if isinstance(plan, plans.SubmoduleCall):
      return dataclasses.replace(plan, hypers=tuple(hypers),
                                 inputs=tuple(inputs))
    return dataclasses.replace(plan, hypers=tuple(hypers))

  def _construction(self, node):
    built = self.constructions.get(id(node))
    if built is None or built[0] is not node:
      return None
    plan = built[1]
    attr = self.attrs.get(id(node))
    if attr is not None:
      if isinstance(plan, plans.SubmoduleCall):
        # called where it was built, with its inputs
        new = self._replaced(plan) or plan
        return self.up.emit.submodule_attr(plans.SubmoduleAttr(attr, new))
      return self.up.emit.submodule_attr(plans.SubmoduleAttr(attr))
    new = self._replaced(plan)
    if new is None:
      return node
    if isinstance(new, plans.SubmoduleCall):
      return self.up.emit.submodule_call(new)
    return self.up.emit.instance(new)

  def visit_Name(self, node):
    return False

  def leave_Name(self, original_node, updated_node):
    new = self._construction(original_node)
    return updated_node if new is None else new

  def visit_Call(self, node):
    # a construction's arguments are its plan's (``_construction``)
    return self.constructions.get(id(node), (None,))[0] is not node

  def leave_Call(self, original_node, updated_node):
    new = self._construction(original_node)
    if new is not None:
      return new
    attr = self.attrs.get(id(original_node))
    if attr is not None:  # a constructor call a rule wrote itself
      return self.up.emit.submodule_attr(plans.SubmoduleAttr(attr))
    return updated_node


class _DropFieldDels(walk.FastTransformer):
  """``del (a, b)`` of parameters that became fields (now ``self.a``)."""

  def leave_Del(self, original_node, updated_node):
    t = updated_node.target
    elems = (list(t.elements) if isinstance(t, (cst.Tuple, cst.List))
             else [cst.Element(value=t)])
    keep = [e for e in elems if not (
        isinstance(e.value, cst.Attribute) and isinstance(e.value.value,
                                                          cst.Name)
        and e.value.value.value == 'self')]
    if len(keep) == len(elems):
      return updated_node
    if not keep:
      return cst.RemoveFromParent()
    if len(keep) == 1:
      return updated_node.with_changes(target=keep[0].value)
    keep = [e.with_changes(comma=cst.MaybeSentinel.DEFAULT) for e in keep]
    return updated_node.with_changes(target=cst.Tuple(elements=keep))


def _code(node):
  return None if node is None else cst.Module([]).code_for_node(node).strip()


def _late_defaults(up, info, fn):
  """Field parameters of a module method whose default is not the field's.

  Legacy gave the method the ``.partial`` keyword when one was bound, else
  the method's own default.  A parameter no ``.partial`` of the class binds
  stays a parameter of the method, with its default (returned in ``keep``);
  one some ``.partial`` binds becomes the field (``self.p``) and gets a TODO
  (``differ``): where a constructor leaves it unbound, the field's default
  replaces the method's.
  """
  bound = up.ctx.codebase.partial_kwargs.get(info.name, set())
  used = walk.LoadedNames(in_del=False)
  fn.body.visit(used)
  keep, differ = set(), []
  ps = fn.params
  for p in list(ps.params) + list(ps.kwonly_params):
    name = p.name.value
    if name not in info.fields or p.default is None:
      continue
    if (_code(p.default) == (info.defaults.get(name) or '').strip()
        or name not in used.names):  # (only in a ``del``: unused)
      continue
    if name in bound or '**' in bound:
      differ.append(name)
    else:
      keep.add(name)
  return keep, differ


def _convert_method(up, info, fn, shared=False):
  """The rewritten module method (no decorator, field parameters dropped).

  Returns (FunctionDef, dropped field parameters, TODO texts), or
  (None, why, None).  ``shared``: the method body will run inside the
  class's one compact method (``_shared_form``), so its submodules may be
  auto-named under loops (a ``legacy_autoname`` counter, as ``__call__``).
  """
  keep, differ = _late_defaults(up, info, fn)
  minfo = info
  if keep:
    minfo = copy.copy(info)
    minfo.fields = [f for f in info.fields if f not in keep]
  rw = apply_rewriter.ApplyRewriter(up, minfo, fn)
  if rw.dynamic and not shared:
    return None, 'its submodule names depend on loops or conditions', None
  body = walk.transform(fn.body, rw)
  if rw.assigned_fields:
    return None, f'it assigns the parameter {rw.assigned_fields[0]!r}', None
  body = walk.transform(body, _DropFieldDels())
  fields = set(rw.fields)
  ps = fn.params

  def keep_(plist):
    return [p for p in plist if p.name.value not in fields]

  plist = keep_(ps.params)
  if plist:
    plist[-1] = plist[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
  kwonly = keep_(ps.kwonly_params)
  star = ps.star_arg
  if isinstance(star, cst.ParamStar) and not kwonly:
    star = cst.MaybeSentinel.DEFAULT
  params = ps.with_changes(params=plist, kwonly_params=kwonly,
                           star_arg=star,
                           posonly_params=keep_(ps.posonly_params))
  dropped = [p.name.value for p in list(ps.params) + list(ps.kwonly_params)
             if p.name.value in fields]
  todos = [f'{fn.name.value}: parameter {p!r} defaults to '
           f'{_code(_param(fn, p).default)} here and to '
           f'{info.defaults.get(p)} in apply; it is the field self.{p} now, '
           'which a constructor that does not bind it sets to apply\'s '
           'default' for p in differ]
  method = up.emit.module_method(plans.ModuleMethod(
      fn=fn, params=params, body=body,
      autoname_counter=_shared.AUTONAME_VAR if rw.used_dynamic else None))
  return method, dropped, todos


def _param(fn, name):
  ps = fn.params
  return next(p for p in list(ps.params) + list(ps.kwonly_params)
              if p.name.value == name)


def convert(up, info, new_body, methods):
  """Rewrites the module methods of a converted class body.

  ``new_body``: the converted class body (``__call__``, helpers ...) with
  the original module methods still in it.  Returns the new body and notes
  on what was done, or (None, why).

  The submodules the methods build move to ``setup`` where that plan is
  certain (``_setup_form``); otherwise ``__call__`` and the methods run
  their bodies inside one compact method (``_shared_form``).
  """
  fns = {s.name.value for s in new_body if isinstance(s, cst.FunctionDef)}
  if 'setup' in fns:
    return None, 'the class also defines setup'
  body, notes = _setup_form(up, info, new_body, methods)
  if body is not None:
    return body, notes
  body, why = _shared_form(up, info, new_body, methods)
  if body is None:
    return None, f'{notes}; {why}'
  return body, why


def _with_todos(up, body, todos):
  """``todos``: method name -> (its line as written, TODO texts), written
  above each method."""
  if not todos:
    return body
  out = []
  for s in body:
    if isinstance(s, cst.FunctionDef) and s.name.value in todos:
      line, whys = todos[s.name.value]
      for why in whys:
        up.ctx.report.left.append({'line': line, 'why': why})
      s = cst_util.add_todos(s, whys)
    out.append(s)
  return out


def _fresh(base, taken):
  name = base
  while name in taken:
    name += '_'
  taken.add(name)
  return name


SCOPE_METHOD = '_legacy_scope'


def _shared_form(up, info, new_body, methods):
  """``__call__`` and the module methods forward to one compact method.

  Linen allows one ``@nn.compact`` method per class, and methods it calls
  may build submodules inline.  So ``__call__``'s body and each module
  method's body move to private methods (``_call_body``, ``_encode_body``
  ...), and the public methods call them through ``_legacy_scope``, the one
  compact method: whichever runs, it builds its submodules inline under the
  names legacy gave them, and finds the parameters ``__call__`` made (legacy
  module methods shared the module's scope the same way).
  """
  converted = {}
  todos = {}
  for m in methods:
    new, dropped, why = _convert_method(up, info, m, shared=True)
    if new is None:
      return None, f'module method {m.name.value}: {dropped}'
    converted[id(m)] = new
    if why:
      # the line of the method as written (the converted one has none)
      todos[m.name.value] = (up._line_of(m), why)  # pylint: disable=protected-access
  body = [converted.get(id(s), s) for s in new_body]
  call = next((s for s in body if isinstance(s, cst.FunctionDef)
               and s.name.value == '__call__'), None)
  if call is None:
    return None, 'no __call__ to share the compact scope with'
  compact = [d for d in call.decorators
             if (cst_util.dotted(d.decorator) or '').endswith('compact')]
  if not compact:
    return None, '__call__ is not compact'
  taken = ({s.name.value for s in body if isinstance(s, cst.FunctionDef)}
           | set(info.fields) | {info.var_kw} | set(_shared.RESERVED_FIELDS))
  scope = _fresh(SCOPE_METHOD, taken)
  forward = {id(call)} | {id(v) for v in converted.values()}
  out = []
  for s in body:
    if isinstance(s, cst.FunctionDef) and id(s) in forward:
      base = 'call' if s.name.value == '__call__' else s.name.value.strip('_')
      public, inner = up.emit.scoped_method(plans.ScopedMethod(
          fn=s, scope=scope, body_name=_fresh(f'_{base}_body', taken),
          drop_decorators=frozenset(id(d) for d in compact)))
      out += [public, inner]
    else:
      out.append(s)
  dispatcher = up.emit.shared_scope(plans.SharedScope(
      name=scope, entry_points=tuple(['__call__'] + [m.name.value
                                                     for m in methods]),
      decorator=compact[0]))
  at = next(i for i, s in enumerate(out) if isinstance(s, cst.FunctionDef))
  out[at:at] = [dispatcher]
  out = _with_todos(up, out, todos)
  return out, [f'__call__ and {sorted(m.name.value for m in methods)} run in '
               f'one compact method ({scope}); their bodies build the shared '
               'submodules inline']


def _setup_form(up, info, new_body, methods):
  """Rewrites the module methods of a converted class body.

  ``new_body``: the converted class body (``__call__``, helpers ...) with
  the original module methods still in it.  Returns the new body and the
  names converted, or (None, why).
  """
  names = {m.name.value for m in methods}
  converted = {}
  notes = []
  todos = {}
  for m in methods:
    new, dropped, why = _convert_method(up, info, m)
    if new is None:
      return None, f'module method {m.name.value}: {dropped}'
    converted[id(m)] = new
    if why:
      # the line of the method as written (the converted one has none)
      todos[m.name.value] = (up._line_of(m), why)  # pylint: disable=protected-access
    if dropped:
      notes.append(f'{m.name.value}: parameters {dropped} are fields')
  body = [converted.get(id(s), s) for s in new_body]
  fns = {s.name.value: s for s in body if isinstance(s, cst.FunctionDef)}
  resolver = resolver_lib.Resolver(up, {})

  def is_ctor(expr):
    ref = resolver(expr)
    return ref is not None and ref.kind in ('layer', 'class', 'attention')

  # functions the module methods reach through self.m(...) calls
  reach, todo = set(names), list(names)
  while todo:
    for c in helpers._self_calls(fns[todo.pop()]):  # pylint: disable=protected-access
      if c in fns and c not in reach and c != '__call__':
        reach.add(c)
        todo.append(c)
  sites = {}
  for fname, fn in fns.items():
    s = _Sites(up.ctx.constructions, is_ctor)
    fn.body.visit(s)
    sites[fname] = s.sites
  hoist = {}
  for fname in [f for f in fns if f in reach]:  # source order
    for _, _, lit, _ in sites[fname]:
      if lit is None:
        return None, (f'{fname} builds a submodule without a literal name '
                      '(linen needs it in setup)')
      hoist.setdefault(lit, [])
  if not hoist:
    return _with_todos(up, body, todos), notes
  taken = set(fns) | set(info.fields) | {info.var_kw} | set(
      _shared.RESERVED_FIELDS)
  bound = {}
  for fname, fn in fns.items():
    b = walk.BoundNames(params=True)
    fn.visit(b)
    bound[fname] = b.names
  attrs = {}  # id(construction) -> setup attribute
  submodules = []  # (attribute, construction)
  for lit in hoist:
    for fname in fns:
      for node, plan, l2, args in sites[fname]:
        if l2 != lit:
          continue
        loads = walk.LoadedNames()
        for v in args:
          v.visit(loads)
        late = sorted((loads.names - {'self'}) & bound[fname])
        if late:
          return None, (f'submodule {lit!r} is built from {late[0]!r}, a '
                        f'value only {fname} knows (linen needs it in setup)')
        hoist[lit].append((node, plan))
    keys = {cst_util.code(node) if plan is None else _plan_key(plan)
            for node, plan in hoist[lit]}
    if len(keys) > 1:
      return None, (f'submodule {lit!r} is built with different arguments '
                    'in two places')
    attr = lit if (lit.isidentifier() and not keyword.iskeyword(lit)
                   and lit not in taken) else None
    if attr is None:
      base = ''.join(ch if ch.isalnum() else '_' for ch in lit)
      attr = f'_submodule_{base}'
      while attr in taken:
        attr += '_'
    taken.add(attr)
    for node, _ in hoist[lit]:
      attrs[id(node)] = attr
    node, plan = hoist[lit][0]
    submodules.append((attr, node if plan is None else plan))
  replace = _Replace(up, up.ctx.constructions, attrs)
  body = [walk.transform(s, replace) if isinstance(s, cst.FunctionDef) else s
          for s in body]
  setup = up.emit.setup(plans.Setup(tuple(submodules)))
  at = next(i for i, s in enumerate(body)
            if isinstance(s, cst.FunctionDef))
  body[at:at] = [setup]
  body = _with_todos(up, body, todos)
  notes.append(f'submodules {sorted(hoist)} -> setup (shared by __call__ '
               f'and {sorted(names)})')
  return body, notes
