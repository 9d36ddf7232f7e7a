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
module classes (direct calls, ``.partial``, ``.init`` / ``.call``,
``super().m(...)`` and methods inherited from codebase bases), dicts
splatted into calls (their keys followed: ``dict(k=v)``, ``{'k': v}``,
``d['k'] = v``, ``d.update``, a ``**kwargs`` parameter is the dict of the
keywords its calls pass; a key not known here reaches every parameter),
containers and subscripts, returns, imports across files,
``functools.partial(f, k=v)`` of a codebase function (and jax transforms of
it), and library calls that return their argument's structure
(``SAME_STRUCTURE``: ``jax_utils.replicate``, ``restore_checkpoint``'s
target, ``tree_map``), the aux of ``jax.value_and_grad(f, has_aux=True)``
/ ``jax.grad(f, has_aux=True)`` (f's second result), ``s.as_dict()`` of a
collection, and absl's ``@parameterized.parameters`` /
``.named_parameters`` cases (the arguments of the test method).  A function
the codebase never calls, or uses as a value (a callback), has
``unknown`` arguments: the codebase is taken as closed except where it
shows that it is not.  A ``@gin.configurable`` one (or one registered with
``gin.external_configurable``) the codebase calls also takes what the
codebase's gin bindings give (gin_bindings.py: ``.gin`` files of the tree,
``gin.parse_config`` strings, ``gin.bind_parameter``; a literal is
``ginval``, a reference ``@C`` the registered value).  A load of a name
right after ``name = value`` in the same block reads that value alone
(``value = parse(value)``).  Where an expression is used as a legacy module
(``X.partial(...)``, called), ``usable`` leaves out what cannot be one
there (a literal, None, a function, a plain class without the attribute):
no run of a working legacy program brings those.  ``--observe`` facts (values
seen at run time) are added as values of the parameters they were seen at.

This module only computes facts; rules read them (``Flow.name_values``,
``Flow.expr_values``, ``Flow.param_values``) and decide.
"""

import heapq

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import gin_bindings
from flaxlegacy.upgrade import layer_table
from flaxlegacy.upgrade import walk

UNKNOWN = ('unknown',)
# jax transformations whose has_aux=True result holds f's aux (flow keeps
# where: Flow._aux_result)
AUX_WRAPPERS = frozenset(('grad', 'value_and_grad'))
# jax transformations of a function, called with its arguments
SAME_RETURN = frozenset(('jit', 'pmap', 'vmap', 'remat', 'checkpoint',
                         'named_call', 'xmap'))
JAX_WRAPPERS = SAME_RETURN | frozenset(('grad', 'value_and_grad'))
# legacy optimizer methods returning an optimizer (or, optimize, a tuple)
OPTIMIZER_METHODS = frozenset(('create', 'apply_gradient', 'replicate',
                               'unreplicate', 'optimize'))
NONE = ('none',)
OTHER = ('other',)
# a value a gin binding gives: a literal (number, string, list, dict, None)
# or an unevaluated reference; never a legacy module or optimizer
GINVAL = ('ginval',)
# gin calls whose result is a GINVAL
GIN_RESULTS = frozenset(('parse_value', 'query_parameter'))
# gin calls that register their first argument as a configurable
GIN_REGISTER = frozenset(('configurable', 'external_configurable',
                          'register'))
# gin calls whose second argument a binding can give
GIN_BIND = frozenset(('bind_parameter', 'constant', 'parse_config'))
# the attributes that only a legacy module (class or partial) has
MODULE_ATTRS = frozenset(('partial', 'init', 'init_by_shape', 'create',
                          'create_by_shape', 'call', 'shared'))
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
    # ModelParamTraversal(f).update(fn, inputs): inputs with some leaves
    # replaced (a model for a model, a dict for a dict)
    'flax.optim.ModelParamTraversal().update': (1, 'inputs'),
    'flax.traverse_util.ModelParamTraversal().update': (1, 'inputs'),
}
# classes of flax.optim that are not optimizer definitions
NOT_OPTIMIZER_DEFS = frozenset(('ModelParamTraversal', 'DynamicScale',
                                'OptimizerState'))
# library classes whose instances the facts follow: class -> the value of
# an instance (('ext', name): its methods are ('ext', name.method))
EXT_INSTANCES = {
    'flax.optim.ModelParamTraversal': 'flax.optim.ModelParamTraversal()',
    'flax.traverse_util.ModelParamTraversal':
        'flax.traverse_util.ModelParamTraversal()',
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
    names = [_decorator_name(d) for d in node.decorators]
    self.open = any('configurable' in n for n in names)
    # gin's: its parameters take what the codebase's gin bindings give
    self.gin = any(_is_gin_registration(n) for n in names)
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
    # per open block (statement list): name -> the plain ``name = value``
    # statement last in it (None: another binding since, maybe nested)
    self.blocks = [{}]

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
      if _is_gin_registration(_decorator_name(d)):
        # @gin.configurable class C: gin calls it with the bindings of
        # C.p, and a reference @C / @C() gives the class or an instance
        self.flow.gin_regs.append((_gin_name(d, node.name.value), self.rel,
                                   qual, 'class' if legacy else 'cls'))
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
    if d.gin and not in_class:
      # @gin.configurable def f: gin calls it with the bindings of f.p,
      # and a reference @f / @f() gives f or what it returns
      for dec in node.decorators:
        if _is_gin_registration(_decorator_name(dec)):
          self.flow.gin_regs.append((_gin_name(dec, node.name.value),
                                     self.rel, qual, 'func'))
    if not in_class:
      self.flow.constraints.append(('def', self.rel, parent.qual,
                                    node.name.value, qual))
    if in_class:
      # absl's @parameterized.parameters(...) / .named_parameters(...): the
      # test runner calls the method with each case's arguments
      for dec in node.decorators:
        kind = _parameterized(dec)
        if kind is not None:
          self.flow.constraints.append(('cases', self.rel, d, dec.decorator,
                                        kind == 'named_parameters'))
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
      # a dict of the keywords the calls pass beyond the named parameters
      # (its keys and values bound by _bind_args)
      self.flow.constraints.append(('value', d.slot(d.starstar),
                                    ('container', d.kwargs_site())))
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
      stateful = (isinstance(v, cst.Call) and cst_util.legacy_attr(
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


class _Values(dict):
  """``Flow.values`` while a fixpoint runs: with ``reads`` a set, every
  look-up of a slot is recorded in it (the slots one constraint read)."""

  __slots__ = ('reads',)

  def __init__(self, *args):
    super().__init__(*args)
    self.reads = None

  def get(self, key, default=None):
    if self.reads is not None:
      self.reads.add(key)
    return dict.get(self, key, default)

  def __getitem__(self, key):
    if self.reads is not None:
      self.reads.add(key)
    return dict.__getitem__(self, key)

  def __contains__(self, key):
    if self.reads is not None:
      self.reads.add(key)
    return dict.__contains__(self, key)


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
    self._dirty = None  # the slots added to in a fixpoint pass
    self.observed = {}  # slot -> set of values seen at run time
    self._stand_in = {}  # slot -> observed values standing in for unknown
    # ('o', rel, id(call)) -> (rel, scope, the optim ...create(...) call)
    self.optimizer_sites = {}
    self._module_files = {}
    self.modules = {}  # rel -> its libcst module (rules read uses there)
    self._called_positions = set()
    self.class_scope = {}  # (rel, qual) -> the scope its bases are in
    # gin (gin_bindings.py): (name, rel, qual, kind) of the configurables
    # the codebase registers; name -> values registered from outside
    # (gin.external_configurable, values in the slot ('ginext', name));
    # macro values in ('ginmacro', name) (gin.constant) or text
    self.gin_regs = []
    self.gin_external = {}
    self.gin_text_macros = {}
    self._gin_texts = {}  # id(parse_config call) -> statements
    self._final = False  # the last round: what is still empty is unknown
    # id(Name load) -> the slot of the ``name = value`` of its block that
    # it reads (_Collect.leave_Assign)
    self.reaching = {}
    # plain classes of the codebase: (rel, qual) -> their codebase bases
    # (resolved each fixpoint round), and the reverse
    self._bases = {}
    self._subs = {}
    # model sites that are an earlier upgrade's legacy_model.Model (a model
    # that carries its module), and what each optimizer site optimizes
    self.carried_sites = set()
    self.optimizer_targets = {}

  # -- building --
  def add_file(self, rel, module, file_facts):
    self._module_files[rel] = file_facts
    self.modules[rel] = module
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
      if self._dirty is not None:
        self._dirty.add(slot)
      return True
    return False

  def _read(self, slot):
    """Records a read of state kept beside ``values`` (``_fixpoint``)."""
    if isinstance(self.values, _Values) and self.values.reads is not None:
      self.values.reads.add(slot)

  def _wrote(self, slot):
    """Records a write of state kept beside ``values`` (``_fixpoint``)."""
    self._changed = True
    if self._dirty is not None:
      self._dirty.add(slot)

  def _add_key(self, site, key, vals):
    """``site[key] = vals`` for a dict (key None: not known here)."""
    key = '*' if key is None else key
    changed = self._add(('keys', site), {key})
    changed |= self._add(('ck', site, key), vals)
    changed |= self._add(site, vals)
    return changed

  def _merge_dict(self, site, others):
    """The keys and values of the dicts ``others`` into dict ``site``
    (``{**d}``, ``dict(d)``, ``site.update(d)``)."""
    changed = False
    for v in others:
      keys = self.dict_keys(v)
      if keys is None:
        changed |= self._add_key(site, None, {UNKNOWN})
        continue
      for k in keys:
        changed |= self._add_key(site, None if k == '*' else k,
                                 self.values.get(('ck', v[1], k), set()))
    return changed

  def dict_keys(self, v):
    """The keys (strings, '*' for keys not known here) a container value
    ``v`` has, or None if it is not a dict the facts follow."""
    if v[0] != 'container':
      return None
    if isinstance(v[1][2], tuple) and v[1][2][0] == 'kwargs':
      return self.values.get(('keys', v[1]), set())
    return self.values.get(('keys', v[1]))

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
    call_nodes = set()
    for c in self.constraints:
      if c[0] == 'call':
        call_nodes.add(id(c[3].func))
        name = cst_util.dotted(c[3].func) or ''
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
    # a dict splatted from a name nothing assigned: unknown keys
    self._final = True
    settled = self._fixpoint() and settled
    if not settled:  # not settled: do not trust the sets
      for slot in self.values:
        self.values[slot].add(UNKNOWN)
    self.values = dict(self.values)  # (the rules read a plain dict)
    return self

  def _fixpoint(self):
    """Applies the constraints until none adds a value, as rounds of
    ``_apply`` over all of them in order would, but re-applying only what
    can change: every application records the slots it reads
    (``_Values``); a slot it adds to puts the constraints that read it back
    in this sweep (those after it) or the next (the others); the optimizer
    sites kept beside the values count as slots (``_read``, ``_wrote``).  All
    of them again where the codebase base classes changed.
    A constraint none of whose slots changed would add nothing."""
    values = self.values
    if not isinstance(values, _Values):
      values = self.values = _Values(values)
    constraints = self.constraints
    every = list(range(len(constraints)))
    todo, readers, bases = every, {}, None
    try:
      for _ in range(MAX_ROUNDS):
        self._resolve_bases()
        if bases is not None and self._bases != bases:
          todo = every
        bases = self._bases
        heap = list(todo)  # (sorted: a heap already)
        queued = set(todo)
        later = set()
        while heap:
          i = heapq.heappop(heap)
          queued.discard(i)
          dirty = self._dirty = set()
          reads = values.reads = set()
          self._apply(constraints[i])
          values.reads = None
          for slot in reads:
            readers.setdefault(slot, set()).add(i)
          for slot in dirty:
            for r in readers.get(slot, ()):
              if r > i and r not in queued:
                heapq.heappush(heap, r)
                queued.add(r)
              elif r <= i:
                later.add(r)
        if not later:
          return True
        todo = sorted(later)
      return False
    finally:
      values.reads = None
      self._dirty = None

  def _resolve_bases(self):
    """The codebase base classes of each plain class (``class
    TransformerTranslate(base_model.BaseModel)``): attributes a base's
    methods set, and methods a base defines, are the subclass's too."""
    bases, subs = {}, {}
    for (rel, qual), node in self.class_nodes.items():
      if self.globals_kind.get((rel, qual)) != 'cls' or not node.bases:
        continue
      outer = qual.rpartition('.')[0]
      found = []
      for b in node.bases:
        if b.keyword is not None:
          continue
        for v in self.expr_values(rel, outer, b.value):
          if v[0] == 'cls' and (v[1], v[2]) != (rel, qual):
            found.append((v[1], v[2]))
      if found:
        bases[(rel, qual)] = found
        for b in found:
          subs.setdefault(b, []).append((rel, qual))
    self._bases, self._subs = bases, subs

  def _ancestry(self, key):
    """``key`` and its codebase bases, nearest first (a simple MRO)."""
    out, todo = [], [key]
    while todo:
      k = todo.pop(0)
      if k not in out:
        out.append(k)
        todo.extend(self._bases.get(k, ()))
    return out

  def _descendants(self, key):
    out, todo = [], list(self._subs.get(key, ()))
    while todo:
      k = todo.pop(0)
      if k not in out:
        out.append(k)
        todo.extend(self._subs.get(k, ()))
    return out

  def _method_defs(self, rel, cls, name):
    """The defs ``obj.name`` can run for an instance of ``cls`` (or of a
    subclass of it): the nearest in its ancestry, and every override in
    its subclasses."""
    out = []
    for k in self._ancestry((rel, cls)):
      d = self.defs.get((k[0], f'{k[1]}.{name}'))
      if d is not None:
        out.append(d)
        break
    for k in self._descendants((rel, cls)):
      d = self.defs.get((k[0], f'{k[1]}.{name}'))
      if d is not None and d not in out:
        out.append(d)
    return out

  def _open_params(self):
    changed = False
    stand_in = self._stand_in
    for _, rel, q, kind in self.gin_regs:
      d = self.method_def(rel, q, '__init__') if kind == 'cls' else None
      if d is not None:
        d.gin = True
    for slot, seen in stand_in.items():
      changed |= self._add(slot, seen)
    for d in self.defs.values():
      if d.gin and d.called and not d.escapes:
        # called by the codebase, and by gin with the codebase's bindings
        # (the 'gin' constraints bind them)
        continue
      if d.open or d.gin or d.escapes or not d.called:
        if self._is_apply(d) and d.called and not (d.open or d.gin):
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
      _, rel, qual, target, value = c
      vals = self._eval_value(rel, qual, value)
      key = _subscript_key(target)
      changed = False
      for v in self.expr_values(rel, qual, target.value):
        if v[0] == 'container':
          changed |= self._add_key(v[1], key, vals)
      return changed
    if kind == 'ginstmt':
      return self._gin_statement(c[1], c[2])
    if kind == 'call':
      return self._call(c[1], c[2], c[3])
    if kind == 'cases':
      return self._cases(*c[1:])
    return False

  def _cases(self, rel, d, call, named):
    """The cases of ``@parameterized.parameters(...)`` (``named``:
    ``.named_parameters``, each case's name first or under
    ``testcase_name``) bound to the parameters of the method ``d``."""
    d.called = True
    qual = d.enclosing.qual
    changed = False
    cases = list(call.args)
    if len(cases) == 1 and not cases[0].star and not isinstance(
        cases[0].value, (cst.Tuple, cst.Dict)):
      # one argument that is not a case (a tuple or a dict) is the
      # iterable of the cases (absl's rule)
      one = cases[0].value
      cases = ([cst.Arg(value=e.value) for e in one.elements
                if not isinstance(e, cst.StarredElement)]
               if isinstance(one, cst.List) and not any(
                   isinstance(e, cst.StarredElement) for e in one.elements)
               else [cst.Arg(value=one, star='*')])
    for a in cases:
      case = a.value
      if a.star or a.keyword is not None:
        args = [cst.Arg(value=case, star='*')]  # cases not known here
      elif isinstance(case, (cst.Tuple, cst.List)):
        els = list(case.elements)[1 if named else 0:]
        args = [cst.Arg(value=e.value, star='*' if isinstance(
            e, cst.StarredElement) else '') for e in els]
      elif isinstance(case, cst.Dict):
        args = []
        for e in case.elements:
          key = (_literal_key(e.key) if isinstance(e, cst.DictElement)
                 else None)
          if not isinstance(key, str):
            args.append(cst.Arg(value=case, star='**'))
            continue
          if key != 'testcase_name':
            args.append(cst.Arg(value=e.value, keyword=cst.Name(key)))
      elif named:
        args = [cst.Arg(value=case, star='*')]  # a case built elsewhere
      else:
        args = [cst.Arg(value=case)]  # one parameter
      changed |= self._bind_args(rel, qual, d, args, 0, 1)
    return changed

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

  def _attr_slots(self, rel, qual, target, load=False):  # pylint: disable=unused-argument
    """Slots an attribute target / load refers to: one per attribute of a
    class family (``_attr_owner``: set in a base, read in a subclass, or
    the other way, it is one slot)."""
    base = target.value
    attr = target.attr.value
    s = self.scopes.get((rel, qual))
    if (isinstance(base, cst.Name) and s is not None and s.cls
        and base.value == s.self_name):
      return [('a', *self._attr_owner(rel, s.cls), attr)]
    out = []
    for v in self.expr_values(rel, qual, base):
      if v[0] == 'instance':
        out.append(('a', *self._attr_owner(v[1], v[2]), attr))
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
      slot = self.reaching.get(id(expr))
      if slot is not None:
        return set(self.values.get(slot, set()))
      slot = self._name_slot(rel, qual, expr.value)
      if slot is None:
        return {OTHER} if expr.value in _BUILTINS else {UNKNOWN}
      return set(self.values.get(slot, set()))
    if isinstance(expr, cst.Attribute):
      f = self._module_files.get(rel)
      attr = cst_util.legacy_attr(expr, f.nn_prefixes) if f else None
      if attr is not None:
        return {self._legacy_value(attr)}
      slots = self._attr_slots(rel, qual, expr, load=True)
      out = set()
      for slot in slots:
        out |= self.values.get(slot, set())
      # (an empty set: nothing known yet, not unknown: the fixpoint may
      # still bring values)
      for v in self.expr_values(rel, qual, expr.value):
        if v[0] == 'module':
          out |= self.values.get(('v', v[1], '', expr.attr.value), set())
        elif v[0] == 'instance':
          ds = self._method_defs(v[1], v[2], expr.attr.value)
          for d in ds:
            if d.property:  # obj.prop: what it returns
              out |= self.values.get(('r', d.rel, d.qual), set())
            else:  # obj.method
              out.add(('boundmethod', d.rel, d.qual))
          if not ds and not slots:
            out.add(UNKNOWN)
        elif v[0] == 'optimizer' and expr.attr.value in ('target', 'params'):
          # optimizer.target (a TrainState's .params): what its create(...)
          # was given
          site = self.optimizer_sites.get(v[1])
          target = self.optimizer_targets.get(v[1])
          self._read(('osite', v[1]))
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
    if isinstance(expr, cst.Dict):
      # a dict: one value per literal, its keys and values in slots
      site = ('c', rel, id(expr))
      self._add(('keys', site), set())
      for e in expr.elements:
        if isinstance(e, cst.DictElement):
          self._add_key(site, _literal_key(e.key),
                        self.expr_values(rel, qual, e.value))
        else:  # {**other, ...}
          self._merge_dict(site, self.expr_values(rel, qual, e.value))
      return {('container', site)}
    if isinstance(expr, (cst.List, cst.Set)):
      # a container: one value per literal, its elements in a slot
      site = ('c', rel, id(expr))
      vals = set()
      for e in expr.elements:
        if isinstance(e, cst.Element):
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
    if attr in layer_table.LAYERS:
      return ('layer', attr, frozenset())
    return ('ext', 'flax.nn.' + attr)

  def _call_values(self, rel, qual, call):
    f = call.func
    f_facts = self._module_files.get(rel)
    if f_facts is not None and (cst_util.legacy_attr(
        f, f_facts.nn_prefixes) == 'Model' or _kept_model(f, f_facts)) and (
            call.args):
      site = ('m', rel, id(call))  # the model's module values
      self._add(site, self.expr_values(rel, qual, call.args[0].value))
      if _carried_model(f, f_facts):
        self.carried_sites.add(site)
      return {('model', site)}
    if f_facts is not None and isinstance(f, cst.Attribute) and (
        f.attr.value == 'create') and f_facts.imports.get(
            cst_util.dotted(f.value) or '', cst_util.dotted(f.value)) in (
                TRAIN_STATE, 'flax.training.' + TRAIN_STATE):
      # an earlier upgrade's TrainState: an optimizer of its params=
      target = _argument(call, None, 'params')
      site = ('o', rel, id(call))
      if target is not None and site not in self.optimizer_targets:
        self.optimizer_targets[site] = (rel, qual, target)
        self._wrote(('osite', site))
      return {('optimizer', site)}
    if self._is_optim(rel, qual, call):
      return {('optdef', cst_util.dotted(call.func).split('.')[-1])}
    if isinstance(f, cst.Attribute) and f.attr.value in OPTIMIZER_METHODS:
      base = self.expr_values(rel, qual, f.value)
      if f.attr.value == 'create' and any(v[0] == 'optdef' for v in base):
        # one optimizer value per creation site (optimizer_sites)
        site = ('o', rel, id(call))
        if site not in self.optimizer_sites:
          self.optimizer_sites[site] = (rel, qual, call)
          self._wrote(('osite', site))
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
    if cst_util.dotted(f) == 'functools.partial' and call.args:
      out = self._partial(rel, qual, call.args[0].value, call.args[1:])
      if _partial_of_function(call):
        # functools.partial(f, k=v) of a codebase function: f, called with
        # the remaining arguments (its keywords are bound by _call)
        out.discard(UNKNOWN)
        for v in self.expr_values(rel, qual, call.args[0].value):
          if v[0] in ('func', 'wrapped', 'cls'):
            # (a partial of a class: calling it makes an instance)
            out.add(v)
          elif v[0] not in ('class', 'layer'):
            out.add(UNKNOWN)
      return out
    name = cst_util.dotted(f) or ''
    if name == 'dict' and self._name_slot(rel, qual, 'dict') is None:
      # dict(k=v, ...), dict(other, k=v): a dict with those keys
      site = ('c', rel, id(call))
      self._add(('keys', site), set())
      for a in call.args:
        vals = self.expr_values(rel, qual, a.value)
        if a.keyword is not None:
          self._add_key(site, a.keyword.value, vals)
        elif a.star == '*':
          self._add_key(site, None, {UNKNOWN})
        else:
          self._merge_dict(site, vals)
      return {('container', site)}
    gin = _gin_call(name, f_facts)
    if gin in GIN_RESULTS:
      return {GINVAL}
    if (isinstance(f, cst.Attribute) and f.attr.value == 'as_dict'
        and not call.args):
      # s.as_dict() of a legacy nn.Collection: its state, which is what the
      # collection is upgraded (a dict; the program rules drop the call)
      base = self.expr_values(rel, qual, f.value)
      if COLLECTION in base:
        return {COLLECTION} | ({UNKNOWN} if UNKNOWN in base else set())
    if (isinstance(f, cst.Attribute) and f.attr.value == 'copy'
        and not call.args):
      base = self.expr_values(rel, qual, f.value)
      if base and all(self.dict_keys(v) is not None for v in base):
        return set(base)  # (the copy shares the slots: more, never less)
    if (name.split('.')[-1] in JAX_WRAPPERS and name.split('.')[0] in (
        'jax', 'flax') and call.args and call.args[0].keyword is None):
      # jax.jit(f) / jax.pmap(f, ...): f, called with the same arguments
      # (jax.grad(f): likewise, returning something else)
      out = set()
      last = name.split('.')[-1]
      # grad / value_and_grad with has_aux=True: the call's result holds
      # the aux (the second element f returns) at a known place
      aux = last if last in AUX_WRAPPERS and any(
          a.keyword is not None and a.keyword.value == 'has_aux'
          and isinstance(a.value, cst.Name) and a.value.value == 'True'
          for a in call.args) else None
      for v in self.expr_values(rel, qual, call.args[0].value):
        if v[0] == 'func' and last in SAME_RETURN:
          out.add(v)
        elif v[0] == 'func':
          out.add(('wrapped', v[1], v[2]) + ((aux,) if aux else ()))
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
      if v[0] == 'ext' and v[1] in EXT_INSTANCES:
        out.add(('ext', EXT_INSTANCES[v[1]]))
      elif v[0] == 'ext' and v[1] in SAME_STRUCTURE:
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
      elif v[0] == 'wrapped' and len(v) == 4:
        out.add(self._aux_result(rel, call, v))
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

  def _aux_result(self, rel, call, v):
    """The value of ``jax.value_and_grad(f, has_aux=True)(...)``
    (``((value, aux), grad)``) or ``jax.grad(f, has_aux=True)(...)``
    (``(grad, aux)``): aux is the second element of what f returns."""
    aux = set()
    for r in self.values.get(('r', v[1], v[2]), set()):
      if r[0] == 'tuple' and r[2] == 2:
        aux |= self.values.get((r[1], 1), set())
      else:
        aux.add(UNKNOWN)
    site = ('t', rel, id(call))
    if v[3] == 'value_and_grad':
      inner = ('ta', rel, id(call))
      self._add((inner, 0), {UNKNOWN})
      self._add((inner, 1), aux)  # (empty until f's return is known)
      self._add((site, 0), {('tuple', inner, 2)})
      self._add((site, 1), {UNKNOWN})
    else:
      self._add((site, 0), {UNKNOWN})
      self._add((site, 1), aux)
    return ('tuple', site, 2)

  def _is_optim(self, rel, qual, expr):
    """``optim.X(...)``: a legacy optimizer definition."""
    del qual
    f = self._module_files.get(rel)
    if f is None or not isinstance(expr, cst.Call):
      return False
    locals_ = getattr(f, 'optim_locals', set())
    name = cst_util.dotted(expr.func) or ''
    head, _, attr = name.rpartition('.')
    full = f.imports.get(name, '')
    if attr in NOT_OPTIMIZER_DEFS or full.rpartition('.')[2] in (
        NOT_OPTIMIZER_DEFS):
      return False
    return bool(attr[:1].isupper()) and (
        head in locals_ or head in ('flax.optim',)
        or full.startswith('flax.optim.'))

  def _partial(self, rel, qual, target, args):
    keys = set()
    for a in args:
      if a.keyword is not None:
        keys.add(a.keyword.value)
      elif a.star == '**':
        # the keys of the dict, where the facts follow them
        for v in self.expr_values(rel, qual, a.value) or {UNKNOWN}:
          known = self.dict_keys(v)
          keys |= ({'**'} if known is None or '*' in known
                   else set(known))
    out = set()
    for v in usable(self.expr_values(rel, qual, target), 'partial', self):
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
    if f_facts is not None and call.args and (cst_util.legacy_attr(
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
        d = self.method_def(v[1], v[2], '__init__')
        if d is not None:
          targets.append((d, 0, 1))
      elif method is None and v[0] == 'instance':
        d = self.method_def(v[1], v[2], '__call__')
        if d is not None:
          targets.append((d, 0, 1))
    if _partial_of_function(call):
      # functools.partial(f, k=v): the keywords it binds go to f's
      # parameters (the rest come with the calls of the partial)
      for v in self.expr_values(rel, qual, call.args[0].value):
        d = None
        if v[0] in ('func', 'wrapped'):
          d = self.defs.get((v[1], v[2]))
        elif v[0] == 'cls':  # functools.partial(C, k=v): C.__init__'s
          d = self.method_def(v[1], v[2], '__init__')
        if d is not None:
          d.called = True
          changed |= self._bind_args(rel, qual, d, call.args[1:], None,
                                     1 if d.is_method else 0)
    gin = _gin_call(cst_util.dotted(f) or '', self._module_files.get(rel))
    if gin is not None:
      changed |= self._gin(rel, qual, call, gin)
    if method is None and isinstance(f, cst.Attribute) and f.attr.value in (
        'update', 'setdefault'):
      # d.update(k=v) / d.update(other) / d.setdefault('k', v) on a dict
      for v in self.expr_values(rel, qual, f.value):
        if self.dict_keys(v) is None:
          continue
        for i, a in enumerate(call.args):
          vals = self.expr_values(rel, qual, a.value)
          if f.attr.value == 'setdefault':
            if i == 0:
              key = _literal_key(a.value)
              rest = call.args[1].value if len(call.args) > 1 else None
              changed |= self._add_key(v[1], key, self.expr_values(
                  rel, qual, rest) if rest is not None else {NONE})
          elif a.keyword is not None:
            changed |= self._add_key(v[1], a.keyword.value, vals)
          elif a.star == '*':
            changed |= self._add_key(v[1], None, {UNKNOWN})
          else:
            changed |= self._merge_dict(v[1], vals)
    if method is None and isinstance(f, cst.Attribute):
      # obj.m(...) / self.m(...) / super().m(...): a method of a class of
      # the codebase (or of one of its bases)
      for v in self._receiver_classes(rel, qual, f.value):
        if (isinstance(f.value, cst.Call)
            and cst_util.dotted(f.value.func) == 'super'):
          # super().m(...): the bases' m, never a subclass's override
          d = self.method_def(v[0], v[1], f.attr.value)
          ds = [d] if d is not None else []
        else:
          ds = self._method_defs(v[0], v[1], f.attr.value)
        for d in ds:
          targets.append((d, 0, 1))
    for d, skip, self_params in targets:
      d.called = True
      changed |= self._bind_args(rel, qual, d, call.args, skip, self_params)
    return changed

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
    if (isinstance(expr, cst.Call) and cst_util.dotted(expr.func) == 'super'
        and s is not None and s.cls and (
            not expr.args or len(expr.args) == 2)):
      # super().m(...) in a method of C: m of C's bases
      cls = (rel, s.cls)
      if expr.args:
        named = [v for v in self.expr_values(rel, qual, expr.args[0].value)
                 if v[0] == 'cls']
        if len(named) != 1:
          return []
        cls = (named[0][1], named[0][2])
      return self.bases(*cls)
    return [(v[1], v[2]) for v in self.expr_values(rel, qual, expr)
            if v[0] == 'instance']

  def bases(self, rel, qual):
    """The codebase classes ``(rel, qual)`` names as its bases."""
    node = self.class_nodes.get((rel, qual))
    if node is None:
      return []
    scope = self.class_scope.get((rel, qual), '')
    out = []
    for b in node.bases:
      if b.keyword is not None:
        continue
      for v in self.expr_values(rel, scope, b.value):
        if v[0] == 'cls' and (v[1], v[2]) != (rel, qual):
          out.append((v[1], v[2]))
    return out

  def method_def(self, rel, qual, name, _seen=None):
    """The def of method ``name`` that class ``(rel, qual)`` has, its
    own or the first of its codebase bases' (depth first), or None."""
    d = self.defs.get((rel, f'{qual}.{name}'))
    if d is not None:
      return d
    seen = _seen if _seen is not None else set()
    if (rel, qual) in seen:
      return None
    seen.add((rel, qual))
    for b in self.bases(rel, qual):
      d = self.method_def(b[0], b[1], name, seen)
      if d is not None:
        return d
    return None

  def may_have(self, rel, qual, attr):
    """Whether class ``(rel, qual)`` of the codebase (or an instance) may
    have attribute ``attr``: it or a base defines or sets it, or a base is
    not a class of the codebase."""
    seen = set()
    todo = [(rel, qual)]
    while todo:
      c = todo.pop()
      if c in seen:
        continue
      seen.add(c)
      node = self.class_nodes.get(c)
      if node is None:
        return True
      if self.defs.get((c[0], f'{c[1]}.{attr}')) is not None or (
          ('a', c[0], c[1], attr) in self.values) or (
              c[1] and (c[0], f'{c[1]}.{attr}') in self.scopes):
        return True
      scope = self.scopes.get(c)
      if scope is not None and attr in scope.bound:
        return True  # a class attribute
      named = [b for b in node.bases if b.keyword is None]
      bs = self.bases(*c)
      if len(bs) != len(named) and not all(
          cst_util.dotted(b.value) == 'object' for b in named
          if (cst_util.dotted(b.value) or '') not in {q for _, q in bs}):
        return True  # a base from outside the codebase
      todo.extend(bs)
    return False

  def _attr_owner(self, rel, qual):
    """The class whose slots hold the attributes of ``(rel, qual)``'s
    instances: the root of its first-base chain in the codebase, so that
    ``self.x`` set in a base and read in a subclass (or the other way)
    is one slot."""
    seen = {(rel, qual)}
    while True:
      bs = self.bases(rel, qual)
      if not bs or bs[0] in seen:
        return rel, qual
      rel, qual = bs[0]
      seen.add((rel, qual))

  def _gin(self, rel, qual, call, what):
    """gin.configurable(X) / gin.external_configurable(X[, name]): X is a
    configurable; gin.bind_parameter('C.p', v): a binding;
    gin.constant('NAME', v): a macro; gin.parse_config('...'): bindings."""
    changed = False
    args = [a for a in call.args if not a.star]
    if what in GIN_REGISTER and args and args[0].keyword is None:
      named = [a for a in args[1:] if a.keyword is None or (
          a.keyword.value == 'name')]
      name = (_literal_key(named[0].value) if named else None) or (
          (cst_util.dotted(args[0].value) or '').split('.')[-1])
      self.gin_external[name] = True
      for v in self.expr_values(rel, qual, args[0].value):
        changed |= self._add(('ginext', name), {v})
        d = None
        if v[0] == 'cls':
          d = self.method_def(v[1], v[2], '__init__')
        elif v[0] == 'func':
          d = self.defs.get((v[1], v[2]))
        if d is not None and not d.gin:
          d.gin = True
          changed = True
    elif what == 'constant' and len(args) > 1:
      key = _literal_key(args[0].value)
      if key is not None:
        changed |= self._add(('ginmacro', key),
                             self.expr_values(rel, qual, args[1].value))
    elif what == 'bind_parameter' and len(args) > 1:
      target = _binding_target(args[0].value)
      changed |= self._gin_bind(target, self.expr_values(
          rel, qual, args[1].value))
    elif what == 'parse_config' and args:
      if id(call) not in self._gin_texts:
        texts = _literal_texts(args[0].value)
        self._gin_texts[id(call)] = (
            None if texts is None else
            [st for t in texts for st in gin_bindings.statements(t)])
      sts = self._gin_texts[id(call)]
      if sts is None:  # a config built at run time: any binding
        changed |= self._gin_bind((None, None), {UNKNOWN})
      else:
        for lhs, value in sts:
          changed |= self._gin_statement(lhs, value)
    return changed

  def add_gin_text(self, text):
    """A config file of the tree (``.gin``): its bindings are facts."""
    for lhs, value in gin_bindings.statements(text):
      self.constraints.append(('ginstmt', lhs, value))

  def _gin_statement(self, lhs, value):
    target = gin_bindings.split_name(lhs)
    if target is None:
      return False
    if target[0] is None:  # NAME = value: a macro
      self.gin_text_macros.setdefault(target[1], value)
      return False
    return self._gin_bind(target, self._gin_text_values(value, set()))

  def _gin_text_values(self, value, seen):
    refs, macros, literal = gin_bindings.value_parts(value)
    out = {GINVAL} if literal else set()
    for name, called in refs:
      out |= self._gin_reference(name, called)
    for m in macros:
      if ('ginmacro', m) in self.values:
        out |= self.values[('ginmacro', m)]
      elif m in self.gin_text_macros and m not in seen:
        out |= self._gin_text_values(self.gin_text_macros[m], seen | {m})
      else:
        out.add(UNKNOWN)
    return out

  def _gin_reference(self, name, called):
    """What ``@name`` (``called``: ``@name()``) gives."""
    out = set()
    found = False
    for gname, rel, qual, kind in self.gin_regs:
      if gname != name:
        continue
      found = True
      if kind == 'cls':
        out.add(('instance', rel, qual) if called else ('cls', rel, qual))
      elif kind == 'func':
        out |= (set(self.values.get(('r', rel, qual), set())) if called
                else {('func', rel, qual)})
      else:  # a legacy module class: @C() would be its output
        out.add(UNKNOWN if called else
                ('class', rel, qual.split('.')[-1], frozenset()))
    if ('ginext', name) in self.values:
      found = True
      for v in self.values[('ginext', name)]:
        if not called:
          out.add(v)
        elif v[0] == 'cls':
          out.add(('instance', v[1], v[2]))
        elif v[0] == 'func':
          out |= set(self.values.get(('r', v[1], v[2]), set()))
        else:
          out.add(UNKNOWN)
    return out if found else {UNKNOWN}

  def _gin_bind(self, target, vals):
    """A binding of ``target`` (configurable name or None for any,
    parameter or None for any) to ``vals``."""
    cname, pname = target
    changed = False
    for d in self._gin_defs(cname):
      names = d.pos[1 if d.is_method else 0:] + d.kwonly
      if pname is None:
        for n in names:
          changed |= self._add(d.slot(n), vals)
        if d.starstar:
          changed |= self._add_key(d.kwargs_site(), None, vals)
      else:
        changed |= self._bind_keyword(d, pname, vals)
    return changed

  def _gin_defs(self, cname):
    out = []
    for gname, rel, qual, kind in self.gin_regs:
      if cname is not None and gname != cname:
        continue
      d = (self.defs.get((rel, qual)) if kind == 'func' else
           self.method_def(rel, qual, '__init__') if kind == 'cls' else None)
      if d is not None:
        out.append(d)
    for name in self.gin_external:
      if cname is not None and name != cname:
        continue
      for v in self.values.get(('ginext', name), ()):
        d = (self.method_def(v[1], v[2], '__init__') if v[0] == 'cls' else
             self.defs.get((v[1], v[2])) if v[0] == 'func' else None)
        if d is not None:
          out.append(d)
    return out

  def _bind_args(self, rel, qual, d, args, skip, self_params):
    """Arguments of one call to the parameters of ``d``; ``skip``: leading
    positional arguments that are not parameters (``init``'s rng), None
    for keywords only."""
    pos = d.pos[self_params:]
    changed = False
    i = 0
    star = False
    # the parameters this call binds itself (by position before any *splat,
    # or by keyword): no splat can bind them (Python refuses a second value)
    bound = set()
    n_pos = 0
    for a in args:
      if a.star == '*':
        break
      if not a.star and a.keyword is None:
        n_pos += 1
    if skip is not None:
      bound.update(pos[:max(0, n_pos - skip)])
    bound.update(a.keyword.value for a in args
                 if a.keyword is not None and not a.star)
    for a in args:
      if a.star == '*':
        star = True
        continue
      if a.star == '**':
        changed |= self._bind_splat(rel, qual, d, a.value, self_params,
                                    bound)
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
      changed |= self._bind_keyword(d, a.keyword.value,
                                    self.expr_values(rel, qual, a.value))
    if star:  # *args: any parameter the call does not bind may come from it
      for n in d.names()[self_params:]:
        if n not in bound:
          changed |= self._add(d.slot(n), {UNKNOWN})
    return changed

  def _bind_keyword(self, d, name, vals):
    if name in d.pos or name in d.kwonly:
      return self._add(d.slot(name), vals)
    if d.starstar:  # into the **kwargs dict
      return self._add_key(d.kwargs_site(), name, vals)
    return False

  def _bind_splat(self, rel, qual, d, expr, self_params, bound=()):
    """``f(**x)``: x's keys to the parameters they name, when x is a dict
    whose keys the facts follow; every parameter may take its values
    where a key is not known here."""
    vals = self.expr_values(rel, qual, expr)
    if not vals and self._final:
      vals = {UNKNOWN}
    changed = False
    for v in vals:
      keys = self.dict_keys(v)
      if keys is None:  # not a dict the facts follow
        keys, v = {'*'}, ('container', None)
        every = {UNKNOWN}
      else:  # what the keys not known here hold
        every = self.values.get(('ck', v[1], '*'), set())
      for k in keys:
        if k != '*':
          changed |= self._bind_keyword(
              d, k, self.values.get(('ck', v[1], k), set()))
          continue
        for n in d.pos[self_params:] + d.kwonly:
          if n not in bound:
            changed |= self._add(d.slot(n), every)
        if d.starstar:
          changed |= self._add_key(d.kwargs_site(), None, every)
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
    rel, cls = self._attr_owner(rel, cls)
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


def _parameterized(d):
  """'parameters' / 'named_parameters' for absl's ``@parameterized.X(...)``
  (``from absl.testing import parameterized``), else None."""
  e = d.decorator
  if not isinstance(e, cst.Call):
    return None
  name = cst_util.dotted(e.func) or ''
  head, _, last = name.rpartition('.')
  if head.split('.')[-1] == 'parameterized' and last in (
      'parameters', 'named_parameters'):
    return last
  return None


def _decorator_name(d):
  """'gin.configurable' for ``@gin.configurable`` and
  ``@gin.configurable('name', ...)``; '' for other shapes."""
  e = d.decorator
  if isinstance(e, cst.Call):
    e = e.func
  return cst_util.dotted(e) or ''


def _is_gin_registration(name):
  return name.split('.')[0] == 'gin' and name.split('.')[-1] in (
      'configurable', 'register')


def _gin_call(name, file_facts):
  """The gin function ``name`` (a dotted callee) calls ('bind_parameter',
  'external_configurable', ...), or None."""
  head, _, attr = name.rpartition('.')
  if not head:
    return None
  full = (getattr(file_facts, 'imports', {}) or {}).get(head, head)
  if full.split('.')[0] != 'gin' and head.split('.')[0] != 'gin':
    return None
  if attr in GIN_RESULTS or attr in GIN_REGISTER or attr in GIN_BIND:
    return attr
  return None


def _gin_name(decorator, default):
  """The name ``@gin.configurable('name')`` registers (else the def's)."""
  e = decorator.decorator
  if isinstance(e, cst.Call):
    for a in e.args:
      if (a.keyword is None or a.keyword.value == 'name') and not a.star:
        n = _literal_key(a.value)
        if n:
          return n
        break
  return default


def _binding_target(node):
  """``(configurable, parameter)`` a gin.bind_parameter name names (None
  where not known here)."""
  lit = _literal_key(node)
  if lit is not None:
    t = gin_bindings.split_name(lit)
    return t if t is not None else (None, None)
  if isinstance(node, (cst.BinaryOperation, cst.FormattedString)):
    code = cst.Module(body=[]).code_for_node(node)
    return gin_bindings.name_prefix(code), None
  return None, None


def _literal_texts(node):
  """The literal strings of ``node`` (a string or a list of them), or
  None."""
  if isinstance(node, (cst.List, cst.Tuple)):
    out = []
    for e in node.elements:
      t = _literal_texts(e.value)
      if t is None:
        return None
      out += t
    return out
  if isinstance(node, cst.ConcatenatedString):
    try:
      v = node.evaluated_value
    except Exception:  # pylint: disable=broad-except
      return None
    return [v] if isinstance(v, str) else None
  v = _literal_key(node)
  return None if v is None else [v]


def _literal_key(node):
  """The string a dict key expression is, or None if not a literal."""
  if isinstance(node, cst.SimpleString):
    try:
      v = node.evaluated_value
    except Exception:  # pylint: disable=broad-except
      return None
    return v if isinstance(v, str) else None
  return None


def _subscript_key(sub):
  """The literal string key of ``d['k']``, or None."""
  if len(sub.slice) != 1 or not isinstance(sub.slice[0].slice, cst.Index):
    return None
  return _literal_key(sub.slice[0].slice.value)


def usable(values, attr=None, flow=None):
  """The values among ``values`` that a working legacy program can have
  where the expression is used as a legacy module: ``X.attr(...)`` (attr
  one of MODULE_ATTRS) or called (attr None).  A gin literal, a literal,
  None cannot be either; a function or a plain class of the codebase has
  no legacy module attribute (the program would fail there, so no run
  that works brings them).  What is left is what the use can hold."""
  out = set()
  for v in values:
    if v in (OTHER, NONE, GINVAL):
      continue
    if attr in MODULE_ATTRS and v[0] in ('func', 'wrapped', 'boundmethod',
                                         'none'):
      continue
    if (attr in MODULE_ATTRS and v[0] in ('cls', 'instance')
        and flow is not None and not flow.may_have(v[1], v[2], attr)):
      continue
    if (attr in ('partial', 'init', 'init_by_shape', 'create',
                 'create_by_shape') and v[0] == 'cls' and flow is not None
        and flow.method_def(v[1], v[2], attr) is None):
      # a plain class used as a legacy module class (X.partial(...)):
      # only legacy modules have these class methods, so a base from
      # outside the codebase (a tf.keras.Model a gin binding also names)
      # does not bring them either
      continue
    out.add(v)
  return out


def _is_property(fn):
  return any(cst_util.dotted(d.decorator) in ('property',
                                               'functools.cached_property')
             for d in fn.decorators)


def _partial_of_function(call):
  """``functools.partial(f, k=v, ...)`` binding keywords only (a call of
  the partial passes f's positional arguments as they are)."""
  return (cst_util.dotted(call.func) == 'functools.partial' and call.args
          and call.args[0].keyword is None and not call.args[0].star
          and isinstance(call.args[0].value, (cst.Name, cst.Attribute))
          and all(a.keyword is not None or a.star == '**'
                  for a in call.args[1:]))


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
  base = cst_util.dotted(func.value)
  return base == 'flax.linen' or file_facts.imports.get(
      base) == 'flax.linen' or _carried_model(func, file_facts)


def _carried_model(func, file_facts):
  """``legacy_model.Model``: the model an earlier upgrade made carry its
  module (the helper copied into the tree, or flaxlegacy's own)."""
  if not (isinstance(func, cst.Attribute) and func.attr.value == 'Model'):
    return False
  base = cst_util.dotted(func.value) or ''
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




def module_choice(codebase, values, use='partial'):
  """What a rewrite may rely on when ``values`` are what an expression
  used as a legacy module (``use``: the attribute of MODULE_ATTRS it is
  used with, or None where it is called; see ``usable``) holds: ``('class', [ModuleInfo, ...])`` when every value is a user
  legacy module class and all of them split their parameters the same way;
  ``('layer', name, [keyword sets])`` when every value is the same legacy
  layer (possibly through ``.partial``); else ``(None, why)``.
  """
  values = list(usable(values, use, getattr(codebase, 'flow', None)))
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
