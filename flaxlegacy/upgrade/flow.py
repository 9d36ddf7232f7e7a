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
* ``('function',)`` -- a lambda, a Python builtin: not legacy, but called
  where a legacy module could be, it takes the call as written (rules/
  called_layers.py), so ``flow.usable`` keeps it there, as it does a
  ``func`` (``other`` it drops);
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
containers and subscripts (``d['k']`` of a dict display the values of
'k' and of the keys not known here; iterating or unpacking it, its keys;
``d.values()``, a container of its values), returns, imports across files,
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

This module composes ``Flow`` (building, solving, the queries rules make)
and re-exports the names rules read; its parts are one module per concern
in ``flow_facts/``:

* ``shared.py``: the abstract values, the tables of library names, the
  value map of a fixpoint and small source helpers (imports no other of
  them);
* ``collect.py``: walking one file into scopes, definitions and
  constraints;
* ``defs.py``: classes, bases, methods, open parameters, test cases;
* ``names.py``: where a name's or an attribute's values live;
* ``expressions.py``: what an expression can hold;
* ``calls.py``: arguments of the codebase's calls into parameters;
* ``gin.py``: gin registrations and bindings;
* ``queries.py``: ``usable``, ``module_values``, ``module_choice``.

``Flow`` is one class of mixins, as the rules' rewriters are: every
constraint reads and writes the one value map, and a mixin's methods call
each other's through ``self``.  A pure move of the one ~2,060-line module:
the same facts.
"""

import heapq

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade.flow_facts import calls
from flaxlegacy.upgrade.flow_facts import collect
from flaxlegacy.upgrade.flow_facts import defs
from flaxlegacy.upgrade.flow_facts import expressions
from flaxlegacy.upgrade.flow_facts import gin
from flaxlegacy.upgrade.flow_facts import names
from flaxlegacy.upgrade.flow_facts import shared
# the names rules and tests read as flow.X
from flaxlegacy.upgrade.flow_facts.queries import module_choice  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.flow_facts.queries import module_values  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.flow_facts.queries import usable  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.flow_facts.shared import AUX_WRAPPERS  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.flow_facts.shared import COLLECTION  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.flow_facts.shared import EXT_INSTANCES  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.flow_facts.shared import FINAL  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.flow_facts.shared import GINVAL  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.flow_facts.shared import GIN_BIND  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.flow_facts.shared import GIN_REGISTER  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.flow_facts.shared import GIN_RESULTS  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.flow_facts.shared import JAX_WRAPPERS  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.flow_facts.shared import FUNCTION  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.flow_facts.shared import MAX_ROUNDS  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.flow_facts.shared import MODULE_ATTRS  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.flow_facts.shared import MODULE_KINDS  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.flow_facts.shared import NONE  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.flow_facts.shared import NOT_OPTIMIZER_DEFS  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.flow_facts.shared import OPTIMIZER_METHODS  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.flow_facts.shared import OTHER  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.flow_facts.shared import SAME_RETURN  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.flow_facts.shared import SAME_STRUCTURE  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.flow_facts.shared import TRAIN_STATE  # pylint: disable=g-importing-member,unused-import
from flaxlegacy.upgrade.flow_facts.shared import UNKNOWN  # pylint: disable=g-importing-member,unused-import


class Flow(defs.DefFacts, names.NameFacts, expressions.ExpressionFacts,
           calls.CallFacts, gin.GinFacts):
  """The value facts of a codebase (see the module docstring): building
  and solving them, and the queries rules make; the constraints of each
  kind are the mixins' (one module each)."""

  def __init__(self, codebase):
    self.codebase = codebase
    self.scopes = {}  # (rel, qual) -> collect.Scope
    self.defs = {}  # (rel, qual) -> collect.Def
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
    # rel -> the source of each top-level statement of its module, where
    # given
    self.statement_texts = {}
    self._called_positions = set()
    self.class_scope = {}  # (rel, qual) -> the scope its bases are in
    # gin (gin_bindings.py): (name, rel, qual, kind) of the configurables
    # the codebase registers; name -> values registered from outside
    # (gin.external_configurable, values in the slot ('ginext', name));
    # macro values in ('ginmacro', name) (gin.constant) or text
    self.gin_regs = []
    self.gin_external = {}
    self.gin_text_macros = {}
    # (configurable, parameter) of every binding (None where not known
    # here: a config built at run time)
    self.gin_targets = set()
    self._gin_texts = {}  # id(parse_config call) -> statements
    # the last round: what is still empty is unknown (a constraint that
    # asks reads the slot ``FINAL`` first: ``_fixpoint`` re-applies it)
    self._final = False
    self._readers = {}  # slot -> the constraints that read it (_fixpoint)
    self._fix_bases = None  # the base classes of the last fixpoint
    # id(Name load) -> the slot of the ``name = value`` of its block that
    # it reads (collect.Collect.leave_Assign)
    self.reaching = {}
    # plain classes of the codebase: (rel, qual) -> their codebase bases
    # (resolved each fixpoint round), and the reverse
    self._bases = {}
    self._subs = {}
    # model sites that are an earlier upgrade's legacy_model.Model (a model
    # that carries its module), and what each optimizer site optimizes
    self.carried_sites = set()
    self.optimizer_targets = {}
    # the container sites of dict displays and dict(...) calls: every key
    # they get is in their ('keys', site) slot (a dict comprehension's are
    # not known)
    self.dict_sites = set()

  # -- building --
  def add_file(self, rel, module, file_facts, statement_texts=None):
    """``statement_texts``: the source of each top-level statement of
    ``module``, if the caller has it (a rule looking for a word skips the
    statements without it)."""
    self._module_files[rel] = file_facts
    self.__dict__.pop('_files_by_module', None)  # (names.py's answers)
    self.modules[rel] = module
    if statement_texts is not None:
      self.statement_texts[rel] = statement_texts
    module.visit(collect.Collect(self, rel, file_facts))

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
    if isinstance(self.values, shared.Values) and self.values.reads is not None:
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

  def literal_dict_keys(self, v):
    """``dict_keys`` of a dict every key of which the facts see put in
    (a ``{...}`` display, a ``dict(...)`` call, a ``**kwargs``), else None:
    a comprehension's or a list's container has values no key names."""
    if v[0] != 'container' or not isinstance(v[1], tuple) or len(v[1]) != 3:
      return None
    kwargs = isinstance(v[1][2], tuple) and v[1][2][0] == 'kwargs'
    if not kwargs and v[1] not in self.dict_sites:
      return None
    return self.dict_keys(v)

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
      seen = {shared.observed_value(v) for v in seen}
      if UNKNOWN in static or not static:
        stand_in[slot] = seen
        continue
      shapes = {shared.shape(w) for w in static}
      new = {v for v in seen if shared.shape(v) not in shapes}
      if new:
        self.contradictions[slot] = (
            f'the run shows {", ".join(sorted(map(shared.describe, new)))} '
            f'where the source shows only '
            f'{", ".join(sorted(map(shared.describe, static)))}')
    if stand_in:
      self.values = {}
      self._stand_in = stand_in
      self._solve()
    return self

  def _callbacks_kept(self, passed, call_nodes):
    """A function handed as an argument to functions of the codebase that
    only call it (``get_model(kind, create_model_fn, ...)`` calling
    ``create_model_fn(M, kwargs, ...)``) is called where the facts see
    every call: it does not escape (its parameters take the values of
    those calls, not unknown).  Any other use of it, or of the parameter
    it lands in, or a callee the facts do not know, and it escapes."""
    arg_of = {}  # id(argument value) -> (rel, qual, call, argument)
    for c in self.constraints:
      if c[0] == 'call':
        for a in c[3].args:
          arg_of[id(a.value)] = (c[1], c[2], c[3], a)
    loads_of = {}  # (rel, name) -> [(qual, node)]
    for rel, qual, node in self.loads:
      loads_of.setdefault((rel, node.value), []).append((qual, node))

    def only_called(d2, name):
      for qual, node in loads_of.get((d2.rel, name), ()):
        if qual != d2.qual and not qual.startswith(d2.qual + '.'):
          continue
        s = self._resolve_scope(d2.rel, qual, name)
        if s is not None and s.qual == d2.qual and id(node) not in call_nodes:
          return False
      return True

    def kept(rel, qual, node):
      site = arg_of.get(id(node))
      if site is None:
        return False
      crel, cqual, call, arg = site
      if arg.star:
        return False
      k = None
      if arg.keyword is None:
        for i, a in enumerate(call.args):
          if a.star:
            return False
          if a is arg:
            k = i
            break
      targets = self.expr_values(crel, cqual, call.func)
      if not targets:
        return False
      for v in targets:
        if v[0] != 'func':
          return False
        d2 = self.defs.get((v[1], v[2]))
        if d2 is None or d2.is_method:
          return False
        if k is None:
          name = arg.keyword.value
          if name not in d2.pos and name not in d2.kwonly:
            return False
        elif k < len(d2.pos):
          name = d2.pos[k]
        else:
          return False
        if not only_called(d2, name):
          return False
      return True

    for d, uses in passed.values():
      if all(kept(*u) for u in uses):
        d.escapes = False

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
        if shared.partial_of_function(c[3]):
          # functools.partial(f, k=v): f is called through the partial's
          # calls (its keywords bound here, see _call)
          call_nodes.add(id(c[3].args[0].value))
    passed = {}  # id(def) -> (def, its loads as a value)
    for rel, qual, node in self.loads:
      if id(node) in call_nodes:
        continue
      d = self._def_named(rel, qual, node.value)
      if d is not None:
        d.escapes = True
        passed.setdefault(id(d), (d, []))[1].append((rel, qual, node))
    self._readers, self._fix_bases = {}, None
    settled = self._fixpoint()
    self._callbacks_kept(passed, call_nodes)
    # then what the codebase does not call (or calls from anywhere) takes
    # arguments from outside: unknown
    opened = self._dirty = set()  # (the slots it adds to)
    try:
      if self._open_params():
        settled = self._fixpoint(opened if settled else None) and settled
    finally:
      self._dirty = None
    # a dict splatted from a name nothing assigned: unknown keys
    self._final = True
    settled = self._fixpoint({FINAL} if settled else None) and settled
    if not settled:  # not settled: do not trust the sets
      for slot in self.values:
        self.values[slot].add(UNKNOWN)
    self.values = dict(self.values)  # (the rules read a plain dict)
    return self

  def _fixpoint(self, changed=None):
    """Applies the constraints until none adds a value, as rounds of
    ``_apply`` over all of them in order would, but re-applying only what
    can change: every application records the slots it reads
    (``shared.Values``); a slot it adds to puts the constraints that read it
    back in this sweep (those after it) or the next (the others); the optimizer
    sites kept beside the values count as slots (``_read``, ``_wrote``).  All
    of them again where the codebase base classes changed.
    A constraint none of whose slots changed would add nothing.

    ``changed``: after a fixpoint that settled, the slots added to since
    (``FINAL`` for the last round's flag): the first sweep applies only the
    constraints that read them (``_readers`` is kept across the calls of
    one ``_solve``), not every constraint again."""
    values = self.values
    if not isinstance(values, shared.Values):
      values = self.values = shared.Values(values)
    constraints = self.constraints
    every = list(range(len(constraints)))
    readers, bases = self._readers, self._fix_bases
    if changed is None:
      todo = every
    else:
      todo = sorted({r for slot in changed for r in readers.get(slot, ())})
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
      self._fix_bases = bases

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
