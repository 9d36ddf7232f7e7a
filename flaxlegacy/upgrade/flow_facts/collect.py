"""Building the facts of one file: ``Collect`` walks it once and records
its scopes (``Scope``), definitions (``Def``) and the constraints
``Flow`` solves (assignments, calls, returns, imports ...)."""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import walk
from flaxlegacy.upgrade.flow_facts import shared
from flaxlegacy.upgrade.flow_facts.shared import COLLECTION  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.flow_facts.shared import NONE  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.flow_facts.shared import UNKNOWN  # pylint: disable=g-importing-member


def _named_params(fn):
  """The parameters of the def or lambda ``fn`` that have names of their
  own (positional-only, positional, keyword-only)."""
  ps = fn.params
  return list(ps.posonly_params) + list(ps.params) + list(ps.kwonly_params)


class Def:
  """A function (or method, or legacy apply) of the codebase."""

  def __init__(self, rel, qual, node, is_method, enclosing):
    self.rel = rel
    self.qual = qual
    self.node = node
    self.pos, self.kwonly, self.star, self.starstar = shared.params(node)
    self.is_method = is_method
    self.is_lambda = False  # ``f = lambda ...`` in a function (node: Lambda)
    self.enclosing = enclosing  # the scope its defaults are evaluated in
    self.called = False
    self.escapes = False  # used as a value: called from anywhere
    names = [shared.decorator_name(d)
             for d in getattr(node, 'decorators', ())]  # (a lambda: none)
    self.open = any('configurable' in n for n in names)
    # gin's: its parameters take what the codebase's gin bindings give
    self.gin = any(shared.is_gin_registration(n) for n in names)
    self.property = any(n in ('property', 'functools.cached_property')
                        for n in names)

  def slot(self, name):
    return ('v', self.rel, self.qual, name)

  def kwargs_site(self):
    """The container site of its ``**kwargs`` dict."""
    return ('c', self.rel, ('kwargs', self.qual))

  def names(self):
    return self.pos + self.kwonly + [n for n in (self.star, self.starstar)
                                     if n]


class Scope:

  def __init__(self, qual, kind, parent, cls=None):
    self.qual = qual
    self.kind = kind  # 'module' | 'function' | 'class'
    self.parent = parent
    self.bound = set()
    self.cls = cls  # for a method: its class qualname
    self.self_name = None  # the method's first parameter


class Collect(walk.FastVisitor):
  """One file: its scopes, definitions and constraints."""

  def __init__(self, flow, rel, file_facts):
    self.flow = flow
    self.rel = rel
    self.f = file_facts
    self.scope = Scope('', 'module', None)
    flow.scopes[(rel, '')] = self.scope
    self.stack = []  # open scopes
    # per open block (statement list): name -> the plain ``name = value``
    # statement last in it (None: another binding since, maybe nested)
    self.blocks = [{}]
    self._named_lambdas = set()  # id of each ``f = lambda ...``

  # -- scopes --
  def _qual(self, name):
    return f'{self.scope.qual}.{name}' if self.scope.qual else name

  def _bind(self, name):
    self.scope.bound.add(name)
    for b in self.blocks:
      if name in b:
        b[name] = None

  # -- straight-line reaching assignments --
  def visit_IndentedBlock(self, node):
    self.blocks.append({})

  def leave_IndentedBlock(self, node):
    self.blocks.pop()

  def visit_SimpleStatementSuite(self, node):
    self.blocks.append({})

  def leave_SimpleStatementSuite(self, node):
    self.blocks.pop()

  def leave_Assign(self, node):
    if id(node) in self._named_lambdas:
      self.blocks[-1][node.targets[0].target.value] = None
      return
    if len(node.targets) == 1 and isinstance(node.targets[0].target,
                                             cst.Name):
      # ``x = v`` in a block: a load of x later in the same block reads v
      # alone (flow.py is otherwise insensitive to the order of
      # statements: ``value = line.split(...)``, then ``value =
      # parse(value)`` and ``use(value)``)
      name = node.targets[0].target.value
      slot = ('v', self.rel, self.scope.qual, name, id(node))
      self.flow.constraints.append(('assign', self.rel, self.scope.qual,
                                    slot, node.value))
      self.blocks[-1][name] = slot

  def visit_ClassDef(self, node):
    self.flow.not_loads.add(id(node.name))
    self._bind(node.name.value)
    qual = self._qual(node.name.value)
    legacy = (node.name.value in self.f.modules
              and self.f.modules[node.name.value].kind == 'class')
    self.flow.globals_kind[(self.rel, qual)] = ('class' if legacy else 'cls')
    self.flow.class_nodes[(self.rel, qual)] = node
    self.flow.class_scope[(self.rel, qual)] = self.scope.qual
    for d in node.decorators:
      if shared.is_gin_registration(shared.decorator_name(d)):
        # @gin.configurable class C: gin calls it with the bindings of
        # C.p, and a reference @C / @C() gives the class or an instance
        self.flow.gin_regs.append((shared.gin_name(d, node.name.value),
                                   self.rel, qual,
                                   'class' if legacy else 'cls'))
    self.flow.constraints.append(('def', self.rel, self.scope.qual,
                                  node.name.value, qual))
    s = Scope(qual, 'class', self.scope)
    self.flow.scopes[(self.rel, qual)] = s
    self.stack.append(self.scope)
    self.scope = s

  def leave_ClassDef(self, node):
    self.scope = self.stack.pop()

  def visit_FunctionDef(self, node):
    self.flow.not_loads.add(id(node.name))
    self._bind(node.name.value)
    qual = self._qual(node.name.value)
    parent = self.scope
    in_class = parent.kind == 'class'
    d = Def(self.rel, qual, node, in_class, self._enclosing(parent))
    self.flow.defs[(self.rel, qual)] = d
    if d.gin and not in_class:
      # @gin.configurable def f: gin calls it with the bindings of f.p,
      # and a reference @f / @f() gives f or what it returns
      for dec in node.decorators:
        if shared.is_gin_registration(shared.decorator_name(dec)):
          self.flow.gin_regs.append((shared.gin_name(dec, node.name.value),
                                     self.rel, qual, 'func'))
    if not in_class:
      self.flow.constraints.append(('def', self.rel, parent.qual,
                                    node.name.value, qual))
    if in_class:
      # absl's @parameterized.parameters(...) / .named_parameters(...): the
      # test runner calls the method with each case's arguments
      for dec in node.decorators:
        kind = shared.parameterized(dec)
        if kind is not None:
          self.flow.constraints.append(('cases', self.rel, d, dec.decorator,
                                        kind == 'named_parameters'))
    self._params(d)
    s = Scope(qual, 'function', parent,
               cls=parent.qual if in_class else None)
    s.bound.update(d.names())
    if in_class and d.pos:
      s.self_name = d.pos[0]
    self.flow.scopes[(self.rel, qual)] = s
    self.stack.append(self.scope)
    self.scope = s

  def _params(self, d):
    """The parameters of ``d`` (a def or a named lambda): defaults,
    evaluated where ``d`` is; ``*args``: unknown; ``**kwargs``: a dict of
    the keywords the calls pass beyond the named parameters (its keys and
    values bound by _bind_args)."""
    for p in _named_params(d.node):
      if p.default is not None:
        self.flow.constraints.append(('assign', self.rel, d.enclosing.qual,
                                      d.slot(p.name.value), p.default))
    if d.star:
      self.flow.constraints.append(('value', d.slot(d.star), UNKNOWN))
    if d.starstar:
      self.flow.constraints.append(('value', d.slot(d.starstar),
                                    ('container', d.kwargs_site())))

  def leave_FunctionDef(self, node):
    self.scope = self.stack.pop()

  def _enclosing(self, s):
    while s.kind == 'class':
      s = s.parent
    return s

  def visit_Lambda(self, node):
    return False  # its parameters are its own; its body returns a value

  # -- bindings --
  def visit_Import(self, node):
    for a in node.names:
      full = cst_util.dotted(a.name)
      local = a.asname.name.value if a.asname else full.split('.')[0]
      self._bind(local)
      target = full if a.asname else full.split('.')[0]
      self.flow.constraints.append(('import', self.rel, self.scope.qual,
                                    local, target, None))

  def visit_ImportFrom(self, node):
    if isinstance(node.names, cst.ImportStar):
      return
    mod = cst_util.dotted(node.module) if node.module is not None else ''
    dots = len(node.relative)
    for a in node.names:
      name = cst_util.dotted(a.name)
      local = a.asname.name.value if a.asname else name
      self._bind(local)
      self.flow.constraints.append(('import', self.rel, self.scope.qual,
                                    local, mod, (name, dots)))

  def visit_Assign(self, node):
    if (len(node.targets) == 1 and isinstance(node.targets[0].target,
                                              cst.Name)
        and isinstance(node.value, cst.Lambda)
        and self.scope.kind == 'function'):
      self._named_lambda(node)
      return
    for t in node.targets:
      self._target(t.target, node.value)

  def _named_lambda(self, node):
    """``f = lambda p: body`` in a function: a function ``f`` of it, as
    ``def f(p): return body`` (its calls bind ``p``; used as a value, it
    escapes and ``p`` is unknown).  The rules read names inside a lambda in
    the enclosing function's scope, so each parameter is also a variable of
    that scope, holding what the parameter holds (a name the scope binds
    otherwise holds both, which only makes it less certain)."""
    self._named_lambdas.add(id(node))
    lam = node.value
    name = node.targets[0].target.value
    self.flow.not_loads.add(id(node.targets[0].target))
    self._bind(name)
    qual = self._qual(name)
    parent = self.scope
    d = Def(self.rel, qual, lam, False, self._enclosing(parent))
    d.is_lambda = True
    self.flow.defs[(self.rel, qual)] = d
    self.flow.constraints.append(('def', self.rel, parent.qual, name, qual))
    self._params(d)
    s = Scope(qual, 'function', parent)
    s.bound.update(d.names())
    self.flow.scopes[(self.rel, qual)] = s
    self.flow.constraints.append(('assign', self.rel, qual, ('r', self.rel,
                                                             qual), lam.body))
    for p in _named_params(lam):
      parent.bound.add(p.name.value)
      self.flow.constraints.append((
          'assign', self.rel, qual,
          ('v', self.rel, parent.qual, p.name.value), p.name))

  def visit_AnnAssign(self, node):
    if node.value is not None:
      self._target(node.target, node.value)
    elif isinstance(node.target, cst.Name):
      self._bind(node.target.value)

  def visit_AugAssign(self, node):
    self._target(node.target, None)

  def visit_For(self, node):
    self._target(node.target, ('elements', node.iter))

  def visit_CompFor(self, node):
    self._target(node.target, ('elements', node.iter))

  def visit_WithItem(self, node):
    if node.asname is not None:
      v = node.item
      stateful = (isinstance(v, cst.Call) and cst_util.legacy_attr(
          v.func, self.f.nn_prefixes) == 'stateful')
      if stateful:
        self._target(node.asname.name, ('value', COLLECTION))
      elif shared.mutate_call(v):
        # ``with coll.mutate() as new:``: legacy's mutable copy of the
        # collection (expressions.py: what ``coll`` holds, if a collection)
        self._target(node.asname.name, v)
      else:
        self._target(node.asname.name, None)

  def visit_NamedExpr(self, node):
    self._target(node.target, node.value)

  def _target(self, t, value):
    """Constraints for ``t = value`` (value None: unknown)."""
    if isinstance(t, cst.Name):
      self._bind(t.value)
      self.flow.not_loads.add(id(t))
      slot = ('v', self.rel, self.scope.qual, t.value)
      self.flow.constraints.append(('assign', self.rel, self.scope.qual,
                                    slot, value))
    elif isinstance(t, (cst.Tuple, cst.List)):
      for i, e in enumerate(t.elements):
        v = e.value
        if isinstance(e, cst.StarredElement):
          self._target(v, None)
        else:
          self._target(v, ('item', value, i, len(t.elements)))
    elif isinstance(t, cst.Attribute):
      self.flow.constraints.append(('setattr', self.rel, self.scope.qual,
                                    t, value))
    elif isinstance(t, cst.Subscript):
      self.flow.constraints.append(('setitem', self.rel, self.scope.qual,
                                    t, value))

  def visit_Return(self, node):
    fn = self._function()
    if fn is not None:
      self.flow.constraints.append((
          'assign', self.rel, self.scope.qual, ('r', self.rel, fn),
          node.value if node.value is not None else ('value', NONE)))

  def _function(self):
    s = self.scope
    return s.qual if s.kind == 'function' else None

  def visit_Call(self, node):
    self.flow.constraints.append(('call', self.rel, self.scope.qual, node))

  def visit_Name(self, node):
    # a function used as a value (not called): called from anywhere
    if id(node) not in self.flow.not_loads:
      self.flow.loads.append((self.rel, self.scope.qual, node))
      slot = self.blocks[-1].get(node.value)
      if slot is not None:
        self.flow.reaching[id(node)] = slot

  def visit_Attribute(self, node):
    self.flow.not_loads.add(id(node.attr))

  def visit_Arg(self, node):
    if node.keyword is not None:
      self.flow.not_loads.add(id(node.keyword))

  def visit_Param(self, node):
    self.flow.not_loads.add(id(node.name))

  def visit_ImportAlias(self, node):
    return False
