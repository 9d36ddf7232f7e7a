"""The whole-codebase value facts: what each name can hold.

For every variable, parameter, ``self`` attribute and return value of the
codebase, the set of abstract values it can hold:

* ``('class', file, name, keywords)`` -- a user legacy module class, with
  the keywords some ``.partial`` bound (a frozenset);
* ``('layer', name, keywords)`` -- a legacy layer (``nn.Conv``), likewise;
* ``('model', site)`` -- an ``nn.Model`` (one per ``nn.Model(...)`` call;
  its module values in the slot ``site``);
* ``('optdef', name)`` -- a ``flax.optim`` optimizer definition
  (``optim.Adam(...)``);
* ``('optimizer', site)`` -- an optimizer (one per ``...create(target)``
  call; ``Flow.optimizer_sites`` has the call);
* ``('collection',)`` -- an ``nn.Collection`` (``with nn.stateful() as s``);
* ``('func', file, qualname)`` / ``('cls', file, qualname)`` /
  ``('instance', file, qualname)`` / ``('module', file)`` -- a function, a
  plain class, an instance of one, a codebase module (for the lookups);
* ``('container', site)`` / ``('tuple', site, n)`` -- a dict / list (a
  table of models; its element values in the slot ``site``), a tuple
  (multiple returns; element i in the slot ``(site, i)``): one value per
  literal in the source, so the sets stay small;
* ``('none',)``, ``('other',)`` -- None; a value known not to be legacy
  (a number, a string, a function of a library);
* ``('unknown',)`` -- anything the source does not tell (an argument from
  outside the codebase, a value computed at run time, a gin binding).

Values flow through assignments (also tuple unpacking), ``self`` attributes
(set in any method, read in any), default arguments, the arguments of every
call the codebase makes of its own functions, classes, methods and legacy
module classes (direct calls, ``.partial``, ``.init`` / ``.call``),
containers and subscripts, returns, imports across files,
``functools.partial(f, k=v)`` of a codebase function (and jax transforms of
it), and library calls that return their argument's structure
(``SAME_STRUCTURE``: ``jax_utils.replicate``, ``restore_checkpoint``'s
target, ``tree_map``).  A function
the codebase never calls, or uses as a value (a callback), or a
``@gin.configurable`` one, has ``unknown`` arguments: the codebase is taken
as closed except where it shows that it is not.  ``--observe`` facts (values
seen at run time) are added as values of the parameters they were seen at.

This module only computes facts; rules read them (``Flow.name_values``,
``Flow.expr_values``, ``Flow.param_values``) and decide.
"""

import libcst as cst

from flaxlegacy.upgrade import facts as facts_lib
from flaxlegacy.upgrade import walk

UNKNOWN = ('unknown',)
# jax transformations of a function, called with its arguments
SAME_RETURN = frozenset(('jit', 'pmap', 'vmap', 'remat', 'checkpoint',
                         'named_call', 'xmap'))
JAX_WRAPPERS = SAME_RETURN | frozenset(('grad', 'value_and_grad'))
# legacy optimizer methods returning an optimizer (or, optimize, a tuple)
OPTIMIZER_METHODS = frozenset(('create', 'apply_gradient', 'replicate',
                               'unreplicate', 'optimize'))
NONE = ('none',)
OTHER = ('other',)
COLLECTION = ('collection',)
MAX_ROUNDS = 12
# library functions that return a value of the same structure (the same
# legacy objects) as one argument: name -> (position, keyword)
SAME_STRUCTURE = {
    'flax.jax_utils.replicate': (0, 'tree'),
    'flax.jax_utils.unreplicate': (0, 'tree'),
    'jax.device_get': (0, 'x'),
    'jax.device_put': (0, 'x'),
    'jax.tree_map': (1, 'tree'),
    'jax.tree_multimap': (1, 'tree'),
    'jax.tree_util.tree_map': (1, 'tree'),
    'jax.tree_util.tree_multimap': (1, 'tree'),
    # the target when there is no checkpoint, else one restored into it
    'flax.training.checkpoints.restore_checkpoint': (1, 'target'),
}
# kinds of values a legacy object rewrite cares about
MODULE_KINDS = ('class', 'layer')
TRAIN_STATE = 'train_state.TrainState'  # (flax.training.)


def _params(fn):
  """(positional names, keyword-only names, *args name, **kwargs name)."""
  ps = fn.params
  pos = [p.name.value for p in list(ps.posonly_params) + list(ps.params)]
  kwonly = [p.name.value for p in ps.kwonly_params]
  star = ps.star_arg.name.value if isinstance(ps.star_arg, cst.Param) else None
  starstar = ps.star_kwarg.name.value if ps.star_kwarg is not None else None
  return pos, kwonly, star, starstar


class _Def:
  """A function (or method, or legacy apply) of the codebase."""

  def __init__(self, rel, qual, node, is_method, enclosing):
    self.rel = rel
    self.qual = qual
    self.node = node
    self.pos, self.kwonly, self.star, self.starstar = _params(node)
    self.is_method = is_method
    self.enclosing = enclosing  # the scope its defaults are evaluated in
    self.called = False
    self.escapes = False  # used as a value: called from anywhere
    self.open = any(
        'configurable' in (facts_lib.dotted(d.decorator) or '')
        or 'configurable' in (facts_lib.dotted(getattr(d.decorator, 'func',
                                                       None)) or '')
        for d in node.decorators)

  def slot(self, name):
    return ('v', self.rel, self.qual, name)

  def names(self):
    return self.pos + self.kwonly + [n for n in (self.star, self.starstar)
                                     if n]


class _Scope:

  def __init__(self, qual, kind, parent, cls=None):
    self.qual = qual
    self.kind = kind  # 'module' | 'function' | 'class'
    self.parent = parent
    self.bound = set()
    self.cls = cls  # for a method: its class qualname
    self.self_name = None  # the method's first parameter


class _Collect(walk.FastVisitor):
  """One file: its scopes, definitions and constraints."""

  def __init__(self, flow, rel, file_facts):
    self.flow = flow
    self.rel = rel
    self.f = file_facts
    self.scope = _Scope('', 'module', None)
    flow.scopes[(rel, '')] = self.scope
    self.stack = []  # open scopes

  # -- scopes --
  def _qual(self, name):
    return f'{self.scope.qual}.{name}' if self.scope.qual else name

  def _bind(self, name):
    self.scope.bound.add(name)

  def visit_ClassDef(self, node):
    self.flow.not_loads.add(id(node.name))
    self._bind(node.name.value)
    qual = self._qual(node.name.value)
    legacy = (node.name.value in self.f.modules
              and self.f.modules[node.name.value].kind == 'class')
    self.flow.globals_kind[(self.rel, qual)] = ('class' if legacy else 'cls')
    self.flow.class_nodes[(self.rel, qual)] = node
    self.flow.constraints.append(('def', self.rel, self.scope.qual,
                                  node.name.value, qual))
    s = _Scope(qual, 'class', self.scope)
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
    d = _Def(self.rel, qual, node, in_class, self._enclosing(parent))
    self.flow.defs[(self.rel, qual)] = d
    if not in_class:
      self.flow.constraints.append(('def', self.rel, parent.qual,
                                    node.name.value, qual))
    # defaults: evaluated where the def is
    ps = node.params
    for p in list(ps.posonly_params) + list(ps.params) + list(
        ps.kwonly_params):
      if p.default is not None:
        self.flow.constraints.append(('assign', self.rel, d.enclosing.qual,
                                      d.slot(p.name.value), p.default))
    s = _Scope(qual, 'function', parent,
               cls=parent.qual if in_class else None)
    s.bound.update(d.names())
    if in_class and d.pos:
      s.self_name = d.pos[0]
    if d.star:
      self.flow.constraints.append(('value', d.slot(d.star), UNKNOWN))
    if d.starstar:
      self.flow.constraints.append(('value', d.slot(d.starstar), UNKNOWN))
    self.flow.scopes[(self.rel, qual)] = s
    self.stack.append(self.scope)
    self.scope = s

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
      full = facts_lib.dotted(a.name)
      local = a.asname.name.value if a.asname else full.split('.')[0]
      self._bind(local)
      target = full if a.asname else full.split('.')[0]
      self.flow.constraints.append(('import', self.rel, self.scope.qual,
                                    local, target, None))

  def visit_ImportFrom(self, node):
    if isinstance(node.names, cst.ImportStar):
      return
    mod = facts_lib.dotted(node.module) if node.module is not None else ''
    dots = len(node.relative)
    for a in node.names:
      name = facts_lib.dotted(a.name)
      local = a.asname.name.value if a.asname else name
      self._bind(local)
      self.flow.constraints.append(('import', self.rel, self.scope.qual,
                                    local, mod, (name, dots)))

  def visit_Assign(self, node):
    for t in node.targets:
      self._target(t.target, node.value)

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
      stateful = (isinstance(v, cst.Call) and facts_lib.legacy_attr(
          v.func, self.f.nn_prefixes) == 'stateful')
      self._target(node.asname.name, ('value', COLLECTION) if stateful
                   else None)

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
                                    t.value, value))

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

  def visit_Attribute(self, node):
    self.flow.not_loads.add(id(node.attr))

  def visit_Arg(self, node):
    if node.keyword is not None:
      self.flow.not_loads.add(id(node.keyword))

  def visit_Param(self, node):
    self.flow.not_loads.add(id(node.name))

  def visit_ImportAlias(self, node):
    return False


class Flow:
  """The value facts of a codebase (see the module docstring)."""

  def __init__(self, codebase):
    self.codebase = codebase
    self.scopes = {}  # (rel, qual) -> _Scope
    self.defs = {}  # (rel, qual) -> _Def
    self.class_nodes = {}  # (rel, qual) -> ClassDef
    self.globals_kind = {}  # (rel, qual) -> 'class' | 'cls'
    self.constraints = []
    self.loads = []
    self.not_loads = set()  # ids of Name nodes that are not loads
    self.values = {}  # slot -> set of values
    self.observed = {}  # slot -> set of values seen at run time
    self._stand_in = {}  # slot -> observed values standing in for unknown
    # ('o', rel, id(call)) -> (rel, scope, the optim ...create(...) call)
    self.optimizer_sites = {}
    self._module_files = {}
    self._called_positions = set()
    # class inheritance inside the codebase (_link_classes): (rel, qual) ->
    # its codebase base classes; the root of its family (attributes on
    # ``self`` are one slot per family: a base class's method sets what a
    # subclass's method reads)
    self.bases = {}
    self._root = {}
    # model sites that are an earlier upgrade's legacy_model.Model (a model
    # that carries its module), and what each optimizer site optimizes
    self.carried_sites = set()
    self.optimizer_targets = {}

  # -- building --
  def add_file(self, rel, module, file_facts):
    self._module_files[rel] = file_facts
    module.visit(_Collect(self, rel, file_facts))

  def _add(self, slot, vals):
    if UNKNOWN in vals and slot in self._stand_in:
      # --observe: what the run showed stands in for what the source
      # cannot tell
      vals = set(vals) - {UNKNOWN}
    cur = self.values.setdefault(slot, set())
    n = len(cur)
    cur |= vals
    if len(cur) != n:
      self._changed = True
      return True
    return False

  def observe(self, facts):
    """Values seen at run time (observe.py): {(rel, qual, parameter):
    values}; call before ``solve``."""
    for (rel, qual, param), vals in facts.items():
      self.observed.setdefault(('v', rel, qual, param), set()).update(vals)

  def solve(self):
    """The facts from the source alone; then, with ``--observe`` facts,
    again with the observed values standing in for the ``unknown`` of the
    parameters they were seen at (where the source names every value and the
    run shows another, a contradiction: ``contradictions``)."""
    self._solve()
    self.contradictions = {}
    if not self.observed:
      return self
    stand_in = {}
    for slot, seen in self.observed.items():
      static = self.values.get(slot, set())
      seen = {_observed_value(v) for v in seen}
      if UNKNOWN in static or not static:
        stand_in[slot] = seen
        continue
      new = {v for v in seen if _shape(v) not in {_shape(w) for w in static}}
      if new:
        self.contradictions[slot] = (
            f'the run shows {", ".join(sorted(map(_describe, new)))} '
            f'where the source shows only '
            f'{", ".join(sorted(map(_describe, static)))}')
    if stand_in:
      self.values = {}
      self._stand_in = stand_in
      self._solve()
    return self

  def contradiction(self, rel, qual, name):
    """Why the run contradicts the source for ``name`` in ``qual``."""
    slot = self._name_slot(rel, qual, name)
    return getattr(self, 'contradictions', {}).get(slot)

  def _solve(self):
    self._link_classes()
    call_nodes = set()
    for c in self.constraints:
      if c[0] == 'call':
        call_nodes.add(id(c[3].func))
        name = facts_lib.dotted(c[3].func) or ''
        if (name.split('.')[-1] in JAX_WRAPPERS
            and name.split('.')[0] in ('jax', 'flax') and c[3].args):
          # jax.jit(f): f is called through the wrapper's calls
          call_nodes.add(id(c[3].args[0].value))
        if _partial_of_function(c[3]):
          # functools.partial(f, k=v): f is called through the partial's
          # calls (its keywords bound here, see _call)
          call_nodes.add(id(c[3].args[0].value))
    for rel, qual, node in self.loads:
      if id(node) in call_nodes:
        continue
      d = self._def_named(rel, qual, node.value)
      if d is not None:
        d.escapes = True
    settled = self._fixpoint()
    # then what the codebase does not call (or calls from anywhere) takes
    # arguments from outside: unknown
    if self._open_params():
      settled = self._fixpoint() and settled
    if not settled:  # not settled: do not trust the sets
      for slot in self.values:
        self.values[slot].add(UNKNOWN)
    return self

  # -- classes of the codebase that derive from one another --
  def _base_class(self, rel, expr):
    """(rel, qual) of the codebase class a base expression names (a class
    of the file, ``from m import C``, ``m.C``), or None."""
    f = self._module_files.get(rel)
    name = facts_lib.dotted(expr)
    if not name or f is None:
      return None
    if (rel, name) in self.class_nodes:
      return (rel, name)
    head, _, rest = name.partition('.')
    full = f.imports.get(head)
    if not full:
      return None
    full = f'{full}.{rest}' if rest else full
    mod, _, cls = full.rpartition('.')
    other = self._file_for_module(rel, mod, 0) if mod else None
    if other is not None and (other, cls) in self.class_nodes:
      return (other, cls)
    return None

  def _link_classes(self):
    if self.bases:
      return
    parent = {}

    def find(k):
      while parent.get(k, k) != k:
        k = parent[k]
      return k

    for (rel, qual), node in self.class_nodes.items():
      for b in node.bases:
        base = self._base_class(rel, b.value)
        if base is not None and base != (rel, qual):
          self.bases.setdefault((rel, qual), []).append(base)
          parent[find((rel, qual))] = find(base)
    self._root = {k: find(k) for k in self.class_nodes}

  def family_root(self, rel, cls):
    """The class whose slots hold the ``self`` attributes of ``cls``."""
    return self._root.get((rel, cls), (rel, cls))

  def _family_defs(self, rel, cls, name):
    """The methods ``name`` a call on an instance of ``cls`` may run: its
    own or its bases' (the nearest), and the overrides of its subclasses."""
    out = []
    k = (rel, cls)
    seen = set()
    while k is not None and k not in seen:  # the nearest definition up
      seen.add(k)
      d = self.defs.get((k[0], f'{k[1]}.{name}'))
      if d is not None:
        out.append(d)
        break
      bases = self.bases.get(k)
      k = bases[0] if bases else None
    root = self.family_root(rel, cls)
    if root != (rel, cls) or any(b == (rel, cls) for bs in self.bases.values()
                                 for b in bs):
      for c, r in self._root.items():
        if r == root and c != (rel, cls) and self._derives(c, (rel, cls)):
          d = self.defs.get((c[0], f'{c[1]}.{name}'))
          if d is not None and d not in out:
            out.append(d)
    return out

  def _derives(self, cls, base):
    todo, seen = [cls], set()
    while todo:
      k = todo.pop()
      if k in seen:
        continue
      seen.add(k)
      for b in self.bases.get(k, ()):
        if b == base:
          return True
        todo.append(b)
    return False

  def _fixpoint(self):
    for _ in range(MAX_ROUNDS):
      self._changed = False
      for c in self.constraints:
        self._apply(c)
      if not self._changed:
        return True
    return False

  def _open_params(self):
    changed = False
    stand_in = self._stand_in
    for slot, seen in stand_in.items():
      changed |= self._add(slot, seen)
    for d in self.defs.values():
      if d.open or d.escapes or not d.called:
        if self._is_apply(d) and d.called and not d.open:
          continue
        names = d.names()[1:] if d.is_method else d.names()
        for n in names:
          if d.slot(n) in stand_in:
            continue  # what the run showed stands in for the unknown
          changed |= self._add(d.slot(n), {UNKNOWN})
    return changed

  def _is_apply(self, d):
    return d.qual.endswith('.apply') and (
        self.globals_kind.get((d.rel, d.qual.rsplit('.', 1)[0])) == 'class')

  def _def_named(self, rel, qual, name):
    scope = self._resolve_scope(rel, qual, name)
    if scope is None:
      return None
    q = f'{scope.qual}.{name}' if scope.qual else name
    return self.defs.get((rel, q))

  # -- constraints --
  def _apply(self, c):
    kind = c[0]
    if kind == 'assign':
      _, rel, qual, slot, value = c
      return self._add(slot, self._eval_value(rel, qual, value))
    if kind == 'value':
      return self._add(c[1], {c[2]})
    if kind == 'def':
      _, rel, qual, name, target = c
      k = self.globals_kind.get((rel, target))
      if k == 'class':
        v = ('class', rel, name, frozenset())
      elif k == 'cls':
        v = ('cls', rel, target)
      else:
        v = ('func', rel, target)
      return self._add(('v', rel, qual, name), {v})
    if kind == 'import':
      _, rel, qual, local, mod, what = c
      return self._add(('v', rel, qual, local),
                       self._import_value(rel, mod, what))
    if kind == 'setattr':
      _, rel, qual, target, value = c
      vals = self._eval_value(rel, qual, value)
      changed = False
      for slot in self._attr_slots(rel, qual, target):
        changed |= self._add(slot, vals)
      return changed
    if kind == 'setitem':
      _, rel, qual, base, value = c
      vals = self._eval_value(rel, qual, value)
      changed = False
      for v in self.expr_values(rel, qual, base):
        if v[0] == 'container':
          changed |= self._add(v[1], vals)
      return changed
    if kind == 'call':
      return self._call(c[1], c[2], c[3])
    return False

  def _eval_value(self, rel, qual, value):
    if value is None:
      return {UNKNOWN}
    if isinstance(value, tuple):
      tag = value[0]
      if tag == 'value':
        return {value[1]}
      if tag == 'elements':
        out = set()
        for v in self.expr_values(rel, qual, value[1]):
          if v[0] == 'container' and v[1][0] == 'pairs':
            out.add(('pair', v[1][1]))
          elif v[0] == 'container' and v[1] == ('keys',):
            out.add(OTHER)
          elif v[0] == 'container':
            out |= self.values.get(v[1], set())
          elif v[0] == 'tuple':
            for i in range(v[2]):
              out |= self.values.get((v[1], i), set())
          else:
            out.add(UNKNOWN)
        return out
      if tag == 'item':
        _, inner, i, n = value
        out = set()
        for v in self._eval_value(rel, qual, inner):
          if v[0] == 'tuple*':  # (optimizer, loss, ...) of optimize()
            out.add(v[1] if i == 0 else OTHER)
          elif v[0] == 'pair' and n == 2:  # (key, value) of T.items()
            out |= self.values.get(v[1], set()) if i == 1 else {OTHER}
          elif v[0] == 'tuple' and v[2] == n:
            out |= self.values.get((v[1], i), set())
          elif v[0] == 'container':
            out |= self.values.get(v[1], set())
          else:
            out.add(UNKNOWN)
        return out
      return {UNKNOWN}
    return self.expr_values(rel, qual, value)

  def _import_value(self, rel, mod, what):
    """Value of an imported name: a codebase module or a name in one."""
    if what is None:  # import a.b.c [as x]
      f = self._file_for_module(rel, mod, 0)
      return {('module', f)} if f else {('ext', mod)}
    name, dots = what
    full = f'{mod}.{name}' if mod else name
    f = self._file_for_module(rel, full, dots)
    if f is not None:  # from pkg import models
      return {('module', f)}
    f = self._file_for_module(rel, mod, dots)
    if f is not None:
      return set(self.values.get(('v', f, '', name), set())) or set()
    return {('ext', full)}

  def _file_for_module(self, rel, mod, dots):
    if dots:
      base = rel.replace('\\', '/').split('/')[:-1]
      base = base[:len(base) - (dots - 1)] if dots > 1 else base
      parts = base + (mod.split('.') if mod else [])
      cands = ['/'.join(parts) + '.py', '/'.join(parts) + '/__init__.py']
      for c in cands:
        if c in self._module_files:
          return c
      return None
    if not mod:
      return None
    stem = mod.replace('.', '/')
    found = None
    for r in self._module_files:
      s = r[:-3] if r.endswith('.py') else r
      if s.endswith('/__init__'):
        s = s[:-len('/__init__')]
      if s == stem or s.endswith('/' + stem) or stem.endswith('/' + s):
        if found is not None and found != r:
          return None
        found = r
    return found

  # -- names --
  def _resolve_scope(self, rel, qual, name):
    """The scope that binds ``name`` seen from scope ``qual``."""
    s = self.scopes.get((rel, qual))
    first = True
    while s is not None:
      if s.kind != 'class' or first:
        if name in s.bound:
          return s
      first = False
      s = s.parent
    return None

  def _name_slot(self, rel, qual, name):
    s = self._resolve_scope(rel, qual, name)
    if s is None:
      return None
    return ('v', rel, s.qual, name)

  def _attr_slots(self, rel, qual, target):
    """Slots an attribute target / load refers to."""
    base = target.value
    attr = target.attr.value
    s = self.scopes.get((rel, qual))
    if (isinstance(base, cst.Name) and s is not None and s.cls
        and base.value == s.self_name):
      r, c = self.family_root(rel, s.cls)
      return [('a', r, c, attr)]
    out = []
    for v in self.expr_values(rel, qual, base):
      if v[0] == 'instance':
        r, c = self.family_root(v[1], v[2])
        out.append(('a', r, c, attr))
    return out

  # -- expressions --
  def expr_values(self, rel, qual, expr):
    """The values ``expr`` (a libcst node in scope ``qual`` of ``rel``) can
    hold, with the facts as they stand."""
    if isinstance(expr, cst.Name):
      if expr.value == 'None':
        return {NONE}
      if expr.value in ('True', 'False'):
        return {OTHER}
      f = self._module_files.get(rel)
      if f is not None and expr.value in f.nn_prefixes:
        return {('nn',)}
      s = self.scopes.get((rel, qual))
      if s is not None and s.cls and expr.value == s.self_name:
        return {('instance', rel, s.cls)}
      slot = self._name_slot(rel, qual, expr.value)
      if slot is None:
        return {OTHER} if expr.value in _BUILTINS else {UNKNOWN}
      return set(self.values.get(slot, set()))
    if isinstance(expr, cst.Attribute):
      f = self._module_files.get(rel)
      attr = facts_lib.legacy_attr(expr, f.nn_prefixes) if f else None
      if attr is not None:
        return {self._legacy_value(attr)}
      slots = self._attr_slots(rel, qual, expr)
      out = set()
      for slot in slots:
        out |= self.values.get(slot, set())
      # (an empty set: nothing known yet, not unknown: the fixpoint may
      # still bring values)
      for v in self.expr_values(rel, qual, expr.value):
        if v[0] == 'module':
          out |= self.values.get(('v', v[1], '', expr.attr.value), set())
        elif v[0] == 'instance':
          ds = self._family_defs(v[1], v[2], expr.attr.value)
          for d in ds:  # obj.method (a property: what it returns)
            if _is_property(d.node):
              out |= self.values.get(('r', d.rel, d.qual), set())
            else:
              out.add(('boundmethod', d.rel, d.qual))
          if not ds and not slots:
            out.add(UNKNOWN)
        elif v[0] == 'optimizer' and expr.attr.value in ('target', 'params'):
          # optimizer.target (a TrainState's .params): what its create(...)
          # was given
          site = self.optimizer_sites.get(v[1])
          target = self.optimizer_targets.get(v[1])
          if site is not None and site[2].args:
            out |= self.expr_values(site[0], site[1], site[2].args[0].value)
          elif target is not None:
            out |= self.expr_values(*target)
          else:
            out.add(UNKNOWN)
        elif v[0] == 'ext':
          out.add(('ext', f'{v[1]}.{expr.attr.value}'))
        elif v[0] in ('class', 'layer') and expr.attr.value in (
            'init', 'call', 'init_by_shape', 'create', 'create_by_shape',
            'partial', 'shared'):
          out.add(('method', v, expr.attr.value))
        else:
          out.add(UNKNOWN)
      return out
    if isinstance(expr, cst.Call):
      return self._call_values(rel, qual, expr)
    if isinstance(expr, cst.Subscript):
      out = set()
      for v in self.expr_values(rel, qual, expr.value):
        if v[0] == 'container':
          out |= self.values.get(v[1], set())
        elif v[0] == 'tuple':
          idx = _int_index(expr)
          if idx is not None and -v[2] <= idx < v[2]:
            out |= self.values.get((v[1], idx % v[2]), set())
          else:
            for i in range(v[2]):
              out |= self.values.get((v[1], i), set())
        else:
          out.add(UNKNOWN)
      return out
    if isinstance(expr, (cst.Dict, cst.List, cst.Set)):
      # a container: one value per literal, its elements in a slot
      site = ('c', rel, id(expr))
      vals = set()
      for e in expr.elements:
        if isinstance(e, (cst.DictElement, cst.Element)):
          vals |= self.expr_values(rel, qual, e.value)
        else:
          vals.add(UNKNOWN)
      self._add(site, vals)
      return {('container', site)}
    if isinstance(expr, (cst.DictComp, cst.ListComp, cst.SetComp,
                         cst.GeneratorExp)):
      # {k: M.partial(**c) for k, c in ...}: a table of its element values
      site = ('c', rel, id(expr))
      elt = expr.value if isinstance(expr, cst.DictComp) else expr.elt
      self._add(site, self.expr_values(rel, qual, elt))
      return {('container', site)}
    if isinstance(expr, cst.Tuple):
      if any(isinstance(e, cst.StarredElement) for e in expr.elements):
        return {UNKNOWN}
      site = ('t', rel, id(expr))
      for i, e in enumerate(expr.elements):
        self._add((site, i), self.expr_values(rel, qual, e.value))
      return {('tuple', site, len(expr.elements))}
    if isinstance(expr, cst.IfExp):
      return (self.expr_values(rel, qual, expr.body)
              | self.expr_values(rel, qual, expr.orelse))
    if isinstance(expr, cst.BooleanOperation):
      return (self.expr_values(rel, qual, expr.left)
              | self.expr_values(rel, qual, expr.right))
    if isinstance(expr, (cst.Integer, cst.Float, cst.Imaginary,
                         cst.SimpleString, cst.ConcatenatedString,
                         cst.FormattedString, cst.Lambda, cst.Comparison,
                         cst.BinaryOperation, cst.UnaryOperation)):
      return {OTHER}
    return {UNKNOWN}

  def _legacy_value(self, attr):
    from flaxlegacy.upgrade.rules import layers  # pylint: disable=g-import-not-at-top
    if attr in layers.LAYERS:
      return ('layer', attr, frozenset())
    return ('ext', 'flax.nn.' + attr)

  def _call_values(self, rel, qual, call):
    f = call.func
    f_facts = self._module_files.get(rel)
    if f_facts is not None and (facts_lib.legacy_attr(
        f, f_facts.nn_prefixes) == 'Model' or _kept_model(f, f_facts)) and (
            call.args):
      site = ('m', rel, id(call))  # the model's module values
      self._add(site, self.expr_values(rel, qual, call.args[0].value))
      if _carried_model(f, f_facts):
        self.carried_sites.add(site)
      return {('model', site)}
    if f_facts is not None and isinstance(f, cst.Attribute) and (
        f.attr.value == 'create') and f_facts.imports.get(
            facts_lib.dotted(f.value) or '', facts_lib.dotted(f.value)) in (
                TRAIN_STATE, 'flax.training.' + TRAIN_STATE):
      # an earlier upgrade's TrainState: an optimizer of its params=
      target = _argument(call, None, 'params')
      site = ('o', rel, id(call))
      if target is not None:
        self.optimizer_targets[site] = (rel, qual, target)
      return {('optimizer', site)}
    if self._is_optim(rel, qual, call):
      return {('optdef', facts_lib.dotted(call.func).split('.')[-1])}
    if isinstance(f, cst.Attribute) and f.attr.value in OPTIMIZER_METHODS:
      base = self.expr_values(rel, qual, f.value)
      if f.attr.value == 'create' and any(v[0] == 'optdef' for v in base):
        # one optimizer value per creation site (optimizer_sites)
        site = ('o', rel, id(call))
        self.optimizer_sites[site] = (rel, qual, call)
        return {('optimizer', site)} | ({UNKNOWN} if any(
            v[0] != 'optdef' for v in base) else set())
      opts = {v for v in base if v[0] == 'optimizer'}
      if f.attr.value != 'create' and opts:
        # apply_gradient / replicate ... of an optimizer: the optimizer
        # (optimize: (optimizer, loss[, aux]))
        rest = {UNKNOWN} if len(opts) != len(base) else set()
        if f.attr.value == 'optimize':
          return {('tuple*', o) for o in opts} | rest
        return opts | rest
    if isinstance(f, cst.Attribute) and f.attr.value == 'replace':
      # model.replace(params=...): a model of the same module
      base = self.expr_values(rel, qual, f.value)
      models = {v for v in base if v[0] == 'model'}
      if models:
        return models | ({UNKNOWN} if len(models) != len(base) else set())
    if facts_lib.dotted(f) == 'functools.partial' and call.args:
      out = self._partial(rel, qual, call.args[0].value, call.args[1:])
      if _partial_of_function(call):
        # functools.partial(f, k=v) of a codebase function: f, called with
        # the remaining arguments (its keywords are bound by _call)
        out.discard(UNKNOWN)
        for v in self.expr_values(rel, qual, call.args[0].value):
          if v[0] in ('func', 'wrapped'):
            out.add(v)
          elif v[0] not in ('class', 'layer'):
            out.add(UNKNOWN)
      return out
    name = facts_lib.dotted(f) or ''
    if (name.split('.')[-1] in JAX_WRAPPERS and name.split('.')[0] in (
        'jax', 'flax') and call.args and call.args[0].keyword is None):
      # jax.jit(f) / jax.pmap(f, ...): f, called with the same arguments
      # (jax.grad(f): likewise, returning something else)
      out = set()
      for v in self.expr_values(rel, qual, call.args[0].value):
        if v[0] == 'func' and name.split('.')[-1] in SAME_RETURN:
          out.add(v)
        elif v[0] == 'func':
          out.add(('wrapped', v[1], v[2]))
        else:
          out.add(UNKNOWN)
      return out
    if isinstance(f, cst.Attribute) and f.attr.value == 'partial':
      return self._partial(rel, qual, f.value, call.args)
    if isinstance(f, cst.Attribute) and f.attr.value in (
        'items', 'values', 'keys') and not call.args:
      # T.values() / T.items() of a table: its entries ((key, value) pairs)
      base = self.expr_values(rel, qual, f.value)
      out = set()
      for v in base:
        if v[0] != 'container':
          out.add(UNKNOWN)
        elif f.attr.value == 'values':
          out.add(v)
        elif f.attr.value == 'keys':
          out.add(('container', ('keys',)))
        else:
          out.add(('container', ('pairs', v[1])))
      return out
    out = set()
    for v in self.expr_values(rel, qual, f):
      if v[0] == 'ext' and v[1] in SAME_STRUCTURE:
        # jax_utils.replicate(x), restore_checkpoint(d, target): x's values
        arg = _argument(call, *SAME_STRUCTURE[v[1]])
        out |= (self.expr_values(rel, qual, arg) if arg is not None
                else {UNKNOWN})
      elif v[0] == 'func':
        out |= self.values.get(('r', v[1], v[2]), set()) or set()
        if (v[1], v[2]) not in self.defs:
          out.add(UNKNOWN)
      elif v[0] == 'cls':
        out.add(('instance', v[1], v[2]))
      elif v[0] == 'method' and v[2] in ('init_by_shape', 'init', 'create',
                                          'create_by_shape'):
        # legacy (outputs, params) / (outputs, model)
        site = ('t', rel, id(call))
        self._add((site, 0), {UNKNOWN})
        if v[2].startswith('create'):
          # ('mc': a model the program rules make params where it is made)
          self._add(('mc', rel, id(call)), {v[1]})
          self._add((site, 1), {('model', ('mc', rel, id(call)))})
        else:
          self._add((site, 1), {('params',)})
        out.add(('tuple', site, 2))
      elif v[0] == 'instance':
        d = self.defs.get((v[1], f'{v[2]}.__call__'))
        out |= (self.values.get(('r', v[1], d.qual), set()) if d
                else {UNKNOWN})
      elif v[0] == 'boundmethod':
        out |= self.values.get(('r', v[1], v[2]), set())
      else:
        out.add(UNKNOWN)
    return out

  def _is_optim(self, rel, qual, expr):
    """``optim.X(...)``: a legacy optimizer definition."""
    del qual
    f = self._module_files.get(rel)
    if f is None or not isinstance(expr, cst.Call):
      return False
    locals_ = getattr(f, 'optim_locals', set())
    name = facts_lib.dotted(expr.func) or ''
    head, _, attr = name.rpartition('.')
    full = f.imports.get(name, '')
    return bool(attr[:1].isupper()) and (
        head in locals_ or head in ('flax.optim',)
        or full.startswith('flax.optim.'))

  def _partial(self, rel, qual, target, args):
    keys = set()
    for a in args:
      if a.keyword is not None:
        keys.add(a.keyword.value)
      elif a.star == '**':
        keys.add('**')
    out = set()
    for v in self.expr_values(rel, qual, target):
      if v[0] == 'class':
        out.add(('class', v[1], v[2], v[3] | frozenset(keys)))
      elif v[0] == 'layer':
        out.add(('layer', v[1], v[2] | frozenset(keys)))
      else:
        out.add(UNKNOWN)
    return out

  # -- calls bind arguments to parameters --
  def _call(self, rel, qual, call):
    f = call.func
    changed = False
    f_facts = self._module_files.get(rel)
    if f_facts is not None and call.args and (facts_lib.legacy_attr(
        f, f_facts.nn_prefixes) == 'Model' or _kept_model(f, f_facts)):
      # every nn.Model(M, ...) has its module values, wherever it stands
      # (an argument of create(...) is not evaluated otherwise)
      self._call_values(rel, qual, call)  # (_add marks the change)
    targets = []  # (def, arguments to skip, positional allowed)
    method = None
    base = f
    if isinstance(f, cst.Attribute) and f.attr.value in (
        'partial', 'init', 'call', 'init_by_shape', 'create',
        'create_by_shape', 'shared'):
      method = f.attr.value
      base = f.value
    for v in self.expr_values(rel, qual, base) if method else (
        self.expr_values(rel, qual, f)):
      if v[0] == 'class':
        d = self.defs.get((v[1], self._class_qual(v[1], v[2]) + '.apply'))
        if d is None:
          continue
        skip = {None: 0, 'partial': None, 'shared': None, 'init': 1,
                'call': 1, 'create': 1, 'init_by_shape': None,
                'create_by_shape': None}.get(method, None)
        targets.append((d, skip, 1))
      elif method is None and v[0] in ('func', 'wrapped'):
        d = self.defs.get((v[1], v[2]))
        if d is not None:
          targets.append((d, 0, 1 if d.is_method else 0))
      elif method is None and v[0] == 'cls':
        d = self.defs.get((v[1], f'{v[2]}.__init__'))
        if d is not None:
          targets.append((d, 0, 1))
      elif method is None and v[0] == 'instance':
        d = self.defs.get((v[1], f'{v[2]}.__call__'))
        if d is not None:
          targets.append((d, 0, 1))
    if _partial_of_function(call):
      # functools.partial(f, k=v): the keywords it binds go to f's
      # parameters (the rest come with the calls of the partial)
      for v in self.expr_values(rel, qual, call.args[0].value):
        if v[0] in ('func', 'wrapped'):
          d = self.defs.get((v[1], v[2]))
          if d is not None:
            changed |= self._bind_args(rel, qual, d, call.args[1:], None,
                                       1 if d.is_method else 0)
    if method is None and isinstance(f, cst.Attribute):
      # obj.m(...) / self.m(...): a method of a class of the codebase (or
      # of its bases, or a subclass's override)
      for v in self._receiver_classes(rel, qual, f.value):
        for d in self._family_defs(v[0], v[1], f.attr.value):
          targets.append((d, 0, 1))
      for d in self._super_defs(rel, qual, f):
        targets.append((d, 0, 1))
    for d, skip, self_params in targets:
      d.called = True
      changed |= self._bind_args(rel, qual, d, call.args, skip, self_params)
    return changed

  def _super_defs(self, rel, qual, f):
    """``super().m`` / ``super(C, self).m``: the base class method."""
    if not (isinstance(f.value, cst.Call)
            and facts_lib.dotted(f.value.func) == 'super'):
      return []
    s = self.scopes.get((rel, qual))
    if s is None or not s.cls:
      return []
    k, seen = (rel, s.cls), set()
    while k not in seen:
      seen.add(k)
      bases = self.bases.get(k)
      if not bases:
        return []
      k = bases[0]
      d = self.defs.get((k[0], f'{k[1]}.{f.attr.value}'))
      if d is not None:
        return [d]
    return []

  def _class_qual(self, rel, name):
    for (r, q), k in self.globals_kind.items():
      if r == rel and k == 'class' and q.split('.')[-1] == name:
        return q
    return name

  def _receiver_classes(self, rel, qual, expr):
    s = self.scopes.get((rel, qual))
    if (isinstance(expr, cst.Name) and s is not None and s.cls
        and expr.value == s.self_name):
      return [(rel, s.cls)]
    return [(v[1], v[2]) for v in self.expr_values(rel, qual, expr)
            if v[0] == 'instance']

  def _bind_args(self, rel, qual, d, args, skip, self_params):
    """Arguments of one call to the parameters of ``d``; ``skip``: leading
    positional arguments that are not parameters (``init``'s rng), None
    for keywords only."""
    pos = d.pos[self_params:]
    changed = False
    i = 0
    star = False
    for a in args:
      if a.star == '*':
        star = True
        continue
      if a.star == '**':
        star = True
        continue
      if a.keyword is None:
        if skip is None:
          continue
        if i < skip:
          i += 1
          continue
        k = i - skip
        i += 1
        if k < len(pos):
          changed |= self._add(d.slot(pos[k]),
                               self.expr_values(rel, qual, a.value))
        elif d.star:
          pass
        continue
      name = a.keyword.value
      if name in d.pos or name in d.kwonly:
        changed |= self._add(d.slot(name),
                             self.expr_values(rel, qual, a.value))
      elif d.starstar:
        changed |= self._add(('kw', d.rel, d.qual, name),
                             self.expr_values(rel, qual, a.value))
    if star:  # splatted: any parameter may come from it
      for n in d.names()[self_params:]:
        changed |= self._add(d.slot(n), {UNKNOWN})
    return changed

  # -- queries (an empty set is returned as {unknown}: nothing known) --
  def name_values(self, rel, qual, name):
    """Values of ``name`` as seen in scope ``qual`` of ``rel``."""
    slot = self._name_slot(rel, qual, name)
    out = set(self.values.get(slot, set())) if slot else {UNKNOWN}
    return frozenset(out or {UNKNOWN})

  def param_values(self, rel, qual, name):
    out = set(self.values.get(('v', rel, qual, name), set()))
    return frozenset(out or {UNKNOWN})

  def attr_values(self, rel, cls, attr):
    rel, cls = self.family_root(rel, cls)
    return frozenset(self.values.get(('a', rel, cls, attr), set())
                     or {UNKNOWN})

  def values_of(self, rel, qual, expr):
    """The values an expression (a libcst node) in scope ``qual`` of
    ``rel`` can hold."""
    return frozenset(self.expr_values(rel, qual, expr) or {UNKNOWN})


_BUILTINS = frozenset(('len', 'range', 'int', 'float', 'str', 'list', 'dict',
                       'tuple', 'set', 'print', 'isinstance', 'enumerate',
                       'zip', 'min', 'max', 'sum', 'abs', 'sorted', 'any',
                       'all', 'super', 'getattr', 'setattr', 'hasattr',
                       'type', 'object', 'ValueError', 'TypeError',
                       'KeyError', 'NotImplementedError', 'Exception',
                       'property', 'staticmethod', 'classmethod', 'map',
                       'filter', 'iter', 'next', 'reversed', 'round', 'bool',
                       'repr', 'format', 'open', 'id', 'hash', 'vars'))


def _is_property(fn):
  return any(facts_lib.dotted(d.decorator) in ('property',
                                               'functools.cached_property')
             for d in fn.decorators)


def _partial_of_function(call):
  """``functools.partial(f, k=v, ...)`` binding keywords only (a call of
  the partial passes f's positional arguments as they are)."""
  return (facts_lib.dotted(call.func) == 'functools.partial' and call.args
          and call.args[0].keyword is None and not call.args[0].star
          and isinstance(call.args[0].value, (cst.Name, cst.Attribute))
          and all(a.keyword is not None for a in call.args[1:]))


def _argument(call, pos, keyword):
  """The argument of ``call`` at position ``pos`` or named ``keyword``
  (None if absent or splatted)."""
  i = 0
  for a in call.args:
    if a.star:
      return None
    if a.keyword is None:
      if i == pos:
        return a.value
      i += 1
    elif a.keyword.value == keyword:
      return a.value
  return None


def _kept_model(func, file_facts):
  """``nn.Model`` where ``nn`` is flax.linen: an nn.Model an earlier
  upgrade kept (linen has no Model), so a second run decides alike."""
  if not (isinstance(func, cst.Attribute) and func.attr.value == 'Model'):
    return False
  base = facts_lib.dotted(func.value)
  return base == 'flax.linen' or file_facts.imports.get(
      base) == 'flax.linen' or _carried_model(func, file_facts)


def _carried_model(func, file_facts):
  """``legacy_model.Model``: the model an earlier upgrade made carry its
  module (the helper copied into the tree, or flaxlegacy's own)."""
  if not (isinstance(func, cst.Attribute) and func.attr.value == 'Model'):
    return False
  base = facts_lib.dotted(func.value) or ''
  full = file_facts.imports.get(base, base)
  return full.split('.')[-1] == 'legacy_helpers' or full in (
      'flaxlegacy.migrate.upgraded',)


def _observed_value(v):
  if v[0] == 'observed-optimizer':
    return ('optimizer', ('observed',))
  if v[0] == 'observed-model':
    return ('model', ('observed', v[1]))
  return v


def _shape(v):
  """What a contradiction compares: the kind and the class / layer."""
  if v[0] == 'class':
    return ('class', v[1], v[2])
  if v[0] == 'layer':
    return ('layer', v[1])
  return (v[0],)


def _describe(v):
  if v[0] == 'class':
    return f'module class {v[2]} ({v[1]})'
  if v[0] == 'layer':
    return f'legacy layer {v[1]}'
  return v[0]


def _int_index(sub):
  if len(sub.slice) != 1:
    return None
  s = sub.slice[0].slice
  if isinstance(s, cst.Index) and isinstance(s.value, cst.Integer):
    return int(s.value.value)
  if (isinstance(s, cst.Index) and isinstance(s.value, cst.UnaryOperation)
      and isinstance(s.value.operator, cst.Minus)
      and isinstance(s.value.expression, cst.Integer)):
    return -int(s.value.expression.value)
  return None


def module_values(values):
  """The legacy module values among ``values``, or None if any value is not
  one (None is allowed when ``allow_none``)."""
  if not values or any(v[0] not in MODULE_KINDS for v in values):
    return None
  return values




def module_choice(codebase, values):
  """What a rewrite may rely on when ``values`` are what an expression
  holds: ``('class', [ModuleInfo, ...])`` when every value is a user
  legacy module class and all of them split their parameters the same way;
  ``('layer', name, [keyword sets])`` when every value is the same legacy
  layer (possibly through ``.partial``); else ``(None, why)``.
  """
  values = [v for v in values]
  if not values or any(v[0] not in MODULE_KINDS for v in values):
    if any(v[0] in MODULE_KINDS for v in values):
      others = sorted({v[0] for v in values if v[0] not in MODULE_KINDS})
      return None, ('it holds a legacy module in some runs and something '
                    f'else ({", ".join(others)}) in others')
    return None, None
  kinds = {v[0] for v in values}
  if kinds == {'layer'}:
    names = {v[1] for v in values}
    if len(names) != 1:
      return None, f'it holds different legacy layers ({sorted(names)})'
    return ('layer', names.pop(), [v[2] for v in values]), None
  if kinds != {'class'}:
    return None, 'it holds both legacy layers and user module classes'
  infos = []
  for v in values:
    f = codebase.files.get(v[1])
    info = f.modules.get(v[2]) if f is not None else None
    if info is None or info.problems:
      return None, f'{v[2]} is not a module class the upgrade converts'
    infos.append(info)
  first = infos[0]
  for i in infos[1:]:
    if (i.params, i.fields, i.call, i.var_kw) != (
        first.params, first.fields, first.call, first.var_kw):
      return None, ('it holds module classes with different parameters ('
                    f'{", ".join(sorted({i.name for i in infos}))})')
  return ('class', infos), None
