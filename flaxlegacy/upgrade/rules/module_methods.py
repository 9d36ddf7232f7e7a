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

Left as it was, with a TODO naming the reason: a module method that builds
a submodule without a literal name, or whose constructor arguments use a
value only known inside the method (a parameter or local), or the same name
built with different arguments in two places.
"""

import keyword

import libcst as cst

from flaxlegacy.upgrade import facts as facts_lib
from flaxlegacy.upgrade import walk
from flaxlegacy.upgrade.rules import helpers
from flaxlegacy.upgrade.rules import methods as methods_rule


def find(up, node):
  """The ``@nn.module_method`` FunctionDefs of a legacy class node."""
  out = []
  for stmt in node.body.body:
    if isinstance(stmt, cst.FunctionDef) and any(
        facts_lib.legacy_attr(d.decorator, up.ctx.facts.nn_prefixes)
        == 'module_method' for d in stmt.decorators):
      out.append(stmt)
  return out


class _Bound(walk.FastVisitor):
  """Names a function binds (parameters, assignment targets, loops ...)."""

  def __init__(self):
    self.names = set()

  def visit_Param(self, node):
    self.names.add(node.name.value)

  def _target(self, t):
    self.names.update(n.value for n in methods_rule._targets(t)  # pylint: disable=protected-access
                      if isinstance(n, cst.Name))

  def visit_AssignTarget(self, node):
    self._target(node.target)

  def visit_AnnAssign(self, node):
    self._target(node.target)

  def visit_AugAssign(self, node):
    self._target(node.target)

  def visit_For(self, node):
    self._target(node.target)

  def visit_CompFor(self, node):
    self._target(node.target)

  def visit_AsName(self, node):
    self._target(node.name)

  def visit_NamedExpr(self, node):
    self._target(node.target)


class _Loads(walk.FastVisitor):
  """Names read in an expression (not attribute names, not keywords)."""

  def __init__(self):
    self.names = set()

  def visit_Attribute(self, node):
    node.value.visit(self)
    return False

  def visit_Arg(self, node):
    node.value.visit(self)
    return False

  def visit_Name(self, node):
    self.names.add(node.value)


def _name_kw(call):
  for a in call.args:
    if a.keyword is not None and a.keyword.value == 'name':
      return a.value
  return None


class _Sites(walk.FastVisitor):
  """Submodule constructions (``Ctor(..., name=...)``) in one function."""

  def __init__(self, is_ctor):
    self.is_ctor = is_ctor
    self.sites = []  # (Call node, literal name or None)

  def visit_Call(self, node):
    if self.is_ctor(node.func):
      n = _name_kw(node)
      lit = None
      if isinstance(n, cst.SimpleString):
        lit = n.evaluated_value
      self.sites.append((node, lit))


class _Replace(cst.CSTTransformer):

  def __init__(self, repl):
    self.repl = repl  # id(original Call) -> attribute name

  def leave_Call(self, original_node, updated_node):
    a = self.repl.get(id(original_node))
    if a is None:
      return updated_node
    return cst.Attribute(value=cst.Name('self'), attr=cst.Name(a))


class _DropFieldDels(cst.CSTTransformer):
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


def _convert_method(up, info, fn):
  """The rewritten module method (no decorator, field parameters dropped)."""
  from flaxlegacy.upgrade.rules import modules  # pylint: disable=g-import-not-at-top
  rw = modules.ApplyRewriter(up, info, fn)
  if rw.dynamic:
    return None, 'its submodule names depend on loops or conditions'
  body = fn.body.visit(rw)
  if rw.assigned_fields:
    return None, f'it assigns the parameter {rw.assigned_fields[0]!r}'
  body = body.visit(_DropFieldDels())
  fields = set(rw.fields)
  ps = fn.params

  def keep(plist):
    return [p for p in plist if p.name.value not in fields]

  plist = keep(ps.params)
  if plist:
    plist[-1] = plist[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
  kwonly = keep(ps.kwonly_params)
  star = ps.star_arg
  if isinstance(star, cst.ParamStar) and not kwonly:
    star = cst.MaybeSentinel.DEFAULT
  params = ps.with_changes(params=plist, kwonly_params=kwonly,
                           star_arg=star,
                           posonly_params=keep(ps.posonly_params))
  dropped = [p.name.value for p in list(ps.params) + list(ps.kwonly_params)
             if p.name.value in fields]
  return fn.with_changes(decorators=[], params=params, body=body), dropped


def convert(up, info, new_body, methods):
  """Rewrites the module methods of a converted class body.

  ``new_body``: the converted class body (``__call__``, helpers ...) with
  the original module methods still in it.  Returns the new body and the
  names converted, or (None, why).
  """
  from flaxlegacy.upgrade.rules import modules  # pylint: disable=g-import-not-at-top
  names = {m.name.value for m in methods}
  converted = {}
  notes = []
  for m in methods:
    new, dropped = _convert_method(up, info, m)
    if new is None:
      return None, f'module method {m.name.value}: {dropped}'
    converted[id(m)] = new
    if dropped:
      notes.append(f'{m.name.value}: parameters {dropped} are fields')
  body = [converted.get(id(s), s) for s in new_body]
  fns = {s.name.value: s for s in body if isinstance(s, cst.FunctionDef)}
  if 'setup' in fns:
    return None, 'the class also defines setup'
  resolver = modules.Resolver(up, {})

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
    s = _Sites(is_ctor)
    fn.body.visit(s)
    sites[fname] = s.sites
  hoist = {}
  for fname in [f for f in fns if f in reach]:  # source order
    for call, lit in sites[fname]:
      if lit is None:
        return None, (f'{fname} builds a submodule without a literal name '
                      '(linen needs it in setup)')
      hoist.setdefault(lit, [])
  if not hoist:
    return body, notes
  taken = set(fns) | set(info.fields) | {info.var_kw} | set(
      modules.RESERVED_FIELDS)
  bound = {}
  for fname, fn in fns.items():
    b = _Bound()
    fn.visit(b)
    bound[fname] = b.names
  repl = {}
  setup_lines = []
  for lit in hoist:
    for fname in fns:
      for call, l2 in sites[fname]:
        if l2 != lit:
          continue
        loads = _Loads()
        for a in call.args:
          a.value.visit(loads)
        late = sorted((loads.names - {'self'}) & bound[fname])
        if late:
          return None, (f'submodule {lit!r} is built from {late[0]!r}, a '
                        f'value only {fname} knows (linen needs it in setup)')
        hoist[lit].append(call)
    codes = {cst.Module([]).code_for_node(c) for c in hoist[lit]}
    if len(codes) > 1:
      return None, (f'submodule {lit!r} is built with different arguments '
                    'in two places')
    code = codes.pop()
    attr = lit if (lit.isidentifier() and not keyword.iskeyword(lit)
                   and lit not in taken) else None
    if attr is None:
      base = ''.join(ch if ch.isalnum() else '_' for ch in lit)
      attr = f'_submodule_{base}'
      while attr in taken:
        attr += '_'
    taken.add(attr)
    for call in hoist[lit]:
      repl[id(call)] = attr
    setup_lines.append(cst.parse_statement(f'self.{attr} = {code}\n'))
  body = [s.visit(_Replace(repl)) if isinstance(s, cst.FunctionDef) else s
          for s in body]
  setup = cst.FunctionDef(
      name=cst.Name('setup'),
      params=cst.Parameters(params=[cst.Param(name=cst.Name('self'))]),
      body=cst.IndentedBlock(body=setup_lines),
      leading_lines=[cst.EmptyLine(indent=False)])
  at = next(i for i, s in enumerate(body)
            if isinstance(s, cst.FunctionDef))
  body[at:at] = [setup]
  notes.append(f'submodules {sorted(hoist)} -> setup (shared by __call__ '
               f'and {sorted(names)})')
  return body, notes
