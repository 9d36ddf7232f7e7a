"""Rule support: what the code does with an ``nn.Model`` wherever it goes.

The program rules make ``nn.Model(M, params)`` its parameters: a call of
the model becomes ``M().apply({'params': model}, ...)``, ``model.params``
the model itself.  A model that reaches a ``self`` attribute, a parameter
of another function (in any file) or a function's return value is
rewritten only where every place it reaches can take what it becomes.
This module reads, for each such place (a flow.py slot), every use of it
in the codebase and says whether the use agrees:

* ``X.params`` -- becomes ``X``;
* ``X(...)`` -- becomes ``M().apply({'params': X}, ...)`` when every model
  the place holds is of one user module class ``M``, built without
  ``.partial`` keywords, that the file of the call can name;
* ``X`` passed to a function of the codebase (its parameter is a place of
  its own, checked the same way), assigned to a name or an attribute
  (likewise), returned (the callers' places), compared with ``is``;
* ``X`` passed where a parameter tree does the same as the model:
  ``jax.tree_util`` functions, ``ModelParamTraversal(f).update(fn, X)`` /
  ``.iterate(X)`` (both take a parameter dict), ``jax.device_get`` ...,
  ``isinstance(X, nn.Model)`` (rewritten to ``dict``), an optimizer's
  ``create(X)`` (the optimizer rules decide there).

Anything else (``X.module``, ``X.replace(...)``, a table, an argument of a
library function, a place that also holds values the source does not
show) disagrees.  Models that share a place are decided together: one
disagreeing place keeps every model that reaches it (and every model that
shares a place with those) as legacy code, with a TODO at each.

Facts only, worked out once per codebase (``codebase.analyses.
model_uses()``): the program rules (rules/programs.py, through
rules/objects.py) decide and emit.
"""

import os

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import flow as flow_lib
from flaxlegacy.upgrade import walk
from flaxlegacy.upgrade.collectors import programs as program_facts

# library calls that do the same on a parameter dict as on an nn.Model
# (the legacy Model is a pytree whose leaves are its parameters)
TREE_FUNCTIONS = frozenset((
    'jax.tree_map', 'jax.tree_multimap', 'jax.tree_leaves',
    'jax.tree_flatten', 'jax.tree_structure', 'jax.tree_util.tree_map',
    'jax.tree_util.tree_multimap', 'jax.tree_util.tree_leaves',
    'jax.tree_util.tree_flatten', 'jax.tree_util.tree_structure',
    'jax.tree_util.tree_reduce', 'jax.tree.map', 'jax.tree.leaves',
    'jax.tree.flatten', 'jax.tree.structure', 'jax.tree.reduce',
    'jax.device_get', 'jax.device_put', 'flax.jax_utils.replicate',
    'flax.jax_utils.unreplicate', 'flax.serialization.to_state_dict',
    'flax.serialization.to_bytes'))
# legacy traversals (and today's, which the upgrade writes for them): their
# update / iterate take a parameter dict as they took a model
TRAVERSALS = frozenset(('flax.optim.ModelParamTraversal',
                        'flax.traverse_util.ModelParamTraversal'))
TRAVERSAL_METHODS = ('update', 'iterate')
# the legacy optimizer definitions whose ``create(model)`` the program rules
# make a TrainState of the model's parameters (their table:
# collectors/programs.py)
REWRITTEN_OPTIMIZERS = program_facts.TX_RULES


def _flow(codebase):
  return getattr(codebase, 'flow', None)


_OTHER = 'other'
_SEEN = {}  # node class -> the one of Name, Attribute, Call it is, or _OTHER


def _seen_kind(t):
  """``_Uses._see``'s question of a node class, worked out once per class
  (it is asked of every node of the walked statements; libcst's classes
  are ABCs, whose isinstance is a slow call when it fails)."""
  kind = next((c for c in (cst.Name, cst.Attribute, cst.Call)
               if issubclass(t, c)), _OTHER)
  _SEEN[t] = kind
  return kind


class _Uses(walk.ScopedVisitor):
  """One file: the occurrences of the places of interest, each with its
  parent chain (the two nodes above it)."""

  def __init__(self, flow, rel, names, attrs, funcs):
    self.flow = flow
    self.rel = rel
    self.names = names  # name -> slots ('v') of interest
    self.attrs = attrs  # attribute name -> slots ('a') of interest
    self.funcs = funcs  # function name -> slots ('r') of interest
    super().__init__()
    self.stack = []
    self.targets = set()  # ids of assignment targets (not uses)
    self.out = []  # (slot, node, parent, grandparent, qual)

  def _qual(self):
    return '.'.join(self.quals)

  def on_visit(self, node):
    self._see(node)
    self.stack.append(node)
    return super().on_visit(node)

  def on_leave(self, original_node):
    self.stack.pop()
    super().on_leave(original_node)

  def _mark_targets(self, t):
    self.targets.add(id(t))
    if isinstance(t, (cst.Tuple, cst.List)):
      for e in t.elements:
        self._mark_targets(e.value)

  def visit_Assign(self, node):
    for t in node.targets:
      self._mark_targets(t.target)

  def visit_AnnAssign(self, node):
    self._mark_targets(node.target)

  def visit_AugAssign(self, node):
    self._mark_targets(node.target)

  def visit_For(self, node):
    self._mark_targets(node.target)

  def visit_CompFor(self, node):
    self._mark_targets(node.target)

  def visit_WithItem(self, node):
    if node.asname is not None:
      self._mark_targets(node.asname.name)

  def visit_Param(self, node):
    self.targets.add(id(node.name))

  def visit_Arg(self, node):
    if node.keyword is not None:
      self.targets.add(id(node.keyword))

  def _record(self, slot, node):
    parent = self.stack[-1] if self.stack else None
    grand = self.stack[-2] if len(self.stack) > 1 else None
    self.out.append((slot, node, parent, grand, self._qual()))

  def _see(self, node):
    if id(node) in self.targets:
      return
    kind = _SEEN.get(type(node))
    if kind is None:
      kind = _seen_kind(type(node))
    if kind is _OTHER:
      return
    if kind is cst.Name and node.value in self.names:
      parent = self.stack[-1] if self.stack else None
      if isinstance(parent, cst.Attribute) and parent.attr is node:
        return
      slot = self.flow._name_slot(self.rel, self._qual(), node.value)  # pylint: disable=protected-access
      if slot in self.names[node.value]:
        self._record(slot, node)
    elif kind is cst.Attribute and node.attr.value in self.attrs:
      for slot in self.flow._attr_slots(self.rel, self._qual(), node):  # pylint: disable=protected-access
        if slot in self.attrs[node.attr.value]:
          self._record(slot, node)
    elif kind is cst.Call:
      f = node.func
      name = (f.value if isinstance(f, cst.Name) else f.attr.value
              if isinstance(f, cst.Attribute) else None)
      if name in self.funcs:
        for v in self.flow.values_of(self.rel, self._qual(), f):
          if v[0] in ('func', 'boundmethod'):
            slot = ('r', v[1], v[2])
            if slot in self.funcs[name]:
              self._record(slot, node)


class ModelUses:
  """The agreement facts of a codebase's nn.Model values (computed once,
  on first use: ``codebase.analyses.model_uses()``)."""

  def __init__(self, codebase):
    self.codebase = codebase
    self.flow = _flow(codebase)
    self.holders = {}  # model value -> slots holding it
    self.slot_why = {}  # slot -> why it disagrees ('' if it agrees)
    self.occurrences = {}  # slot -> [(node, parent, grand, rel, qual)]
    self.kept = {}  # model value -> sorted reasons (empty: rewritten)
    # model value -> the reasons of places that are not locals of a
    # function (a parameter, an attribute, a return, a table): a model
    # create_by_shape makes is followed through locals by the program rules
    self.kept_beyond = {}
    self.files = set()  # files where a place holding a model is used
    self._build()

  # -- facts --
  def _build(self):
    flow = self.flow
    models = {}
    for slot, vals in flow.values.items():
      for v in vals:
        if v[0] == 'model':
          models.setdefault(v, set()).add(slot)
    self.holders = models
    interesting = set()
    for slots in models.values():
      interesting |= slots
    names, attrs, funcs = {}, {}, {}
    for slot in interesting:
      if not isinstance(slot[0], str):
        continue
      if slot[0] == 'v':
        names.setdefault(slot[1], {}).setdefault(slot[3], set()).add(slot)
      elif slot[0] == 'a':
        attrs.setdefault(slot[3], set()).add(slot)
      elif slot[0] == 'r':
        funcs.setdefault(slot[2].split('.')[-1], set()).add(slot)
    modules = getattr(flow, 'modules', {})
    texts = getattr(flow, 'statement_texts', {})
    for rel, module in modules.items():
      file_names = names.get(rel, {})
      if not (file_names or attrs or funcs):
        continue
      # a name's slot is in its own file; attributes and returns are
      # reached from any file
      v = _Uses(flow, rel, file_names, attrs, funcs)
      stmts = texts.get(rel)
      if stmts is None or len(stmts) != len(module.body):
        module.visit(v)
      else:  # only the top-level statements that write one of the words
        words = [w for ws in (file_names, attrs, funcs) for w in ws]
        v.stack.append(module)
        for stmt, text in zip(module.body, stmts):
          if any(w in text for w in words):
            stmt.visit(v)
      for slot, node, parent, grand, qual in v.out:
        self.occurrences.setdefault(slot, []).append(
            (node, parent, grand, rel, qual))
        self.files.add(rel)
    for slot in interesting:
      self.slot_why[slot] = self._slot_why(slot)
    # models that share a place are decided together
    parent = {m: m for m in models}

    def find(m):
      while parent[m] != m:
        parent[m] = parent[parent[m]]
        m = parent[m]
      return m

    by_slot = {}
    for m, slots in models.items():
      for s in slots:
        if self._is_local(s):
          continue  # the program rules follow a local assignment by assignment
        if s in by_slot:
          parent[find(m)] = find(by_slot[s])
        else:
          by_slot[s] = m
    reasons = {}
    beyond = {}  # the reasons of places that are not locals
    for m, slots in models.items():
      r = reasons.setdefault(find(m), set())
      b = beyond.setdefault(find(m), set())
      for s in slots:
        if self.slot_why.get(s) and not self._is_local(s):
          b.add(self.slot_why[s])
      if m[1][0] == 'm' and not self._module_known(m) and any(
          not self._is_local(s) and isinstance(s[0], str)
          and s[0] in ('v', 'a', 'r', 'c') for s in slots):
        # the program rules keep an nn.Model whose module they cannot
        # name where it is made: so does every place it shares
        r.add('a model whose module is not known where it is made')
      for s in slots:
        if self.slot_why.get(s):
          r.add(self.slot_why[s])
    for m in models:
      self.kept[m] = sorted(reasons[find(m)])
      self.kept_beyond[m] = sorted(beyond[find(m)])

  def _is_local(self, slot):
    """A variable of a function that is not one of its parameters, or of
    a file's top level (a script)."""
    if slot[0] != 'v':
      return False
    if not slot[2]:
      return True
    d = self.flow.defs.get((slot[1], slot[2]))
    return not (d is not None and slot[3] in d.names())

  def _module_known(self, model_value):
    mods = self.flow.values.get(model_value[1], set())
    choice, _ = flow_lib.module_choice(self.codebase, list(mods))
    return choice is not None and choice[0] == 'class'

  def _slot_why(self, slot):
    """Why the place ``slot`` cannot take what its models become, or ''."""
    kind = slot[0]
    if not isinstance(kind, str):
      return ''  # a tuple's element: followed where it is unpacked
    if kind in ('m', 'mc'):
      return ''
    if kind == 'c':
      return 'a table (dict / list)'
    vals = self.flow.values.get(slot, set())
    d = None
    if kind == 'v':
      d = self.flow.defs.get((slot[1], slot[2]))
      where = (f'the parameter {slot[3]!r} of {slot[2]}'
               if d is not None and slot[3] in d.names()
               else f'the variable {slot[3]!r} of {slot[2] or slot[1]}')
    elif kind == 'a':
      where = f'the attribute {slot[2].split(".")[-1]}.{slot[3]}'
    elif kind == 'r':
      where = f'the return value of {slot[2]}'
    else:
      return f'a place the upgrade does not follow ({kind})'
    others = {v[0] for v in vals if v[0] not in ('model', 'none')}
    if others:
      return (f'{where}, which also holds '
              f'{"values the source does not show" if "unknown" in others else ", ".join(sorted(others))}')
    # a local of the function that holds it: the program rules follow its
    # calls and optimizers there (the module where it was made, the
    # TrainState ...; a TODO at the call where they cannot)
    local = self._is_local(slot)
    for node, parent, grand, rel, qual in self.occurrences.get(slot, ()):
      why = self._use_why(slot, node, parent, grand, rel, qual, local)
      if why:
        return f'{where} ({why})'
    return ''

  def _use_why(self, slot, node, parent, grand, rel, qual, local=False):
    if isinstance(parent, cst.Attribute) and parent.value is node:
      if parent.attr.value == 'params' or local:
        # (another attribute of a local: the program rules' TODO there)
        return ''
      return f'.{parent.attr.value}'
    if isinstance(parent, cst.Call) and parent.func is node:
      if not local and self.call_class(slot, rel) is None:
        return 'a call whose module is not one class known there'
      return ''
    if isinstance(parent, cst.Arg) and parent.value is node and isinstance(
        grand, cst.Call):
      return self._arg_why(parent, grand, rel, qual, local)
    if isinstance(parent, (cst.Assign, cst.AnnAssign)) and (
        parent.value is node):
      targets = ([t.target for t in parent.targets] if isinstance(
          parent, cst.Assign) else [parent.target])
      if all(isinstance(t, (cst.Name, cst.Attribute)) for t in targets):
        return ''
      return 'an assignment to a subscript or a tuple'
    if isinstance(parent, cst.Return):
      return ''
    if isinstance(parent, cst.Param) and parent.default is node:
      return ''  # a default: the parameter is a place of its own
    if isinstance(parent, cst.Comparison) and all(
        isinstance(c.operator, (cst.Is, cst.IsNot))
        for c in parent.comparisons):
      return ''
    if isinstance(parent, cst.Element) and isinstance(grand, cst.Tuple):
      return ''  # a tuple's element: followed where it is unpacked
    return f'a use as {type(parent).__name__}'

  def _arg_why(self, arg, call, rel, qual, local=False):
    if arg.star:
      return 'a splatted argument'
    flow = self.flow
    f = call.func
    name = cst_util.dotted(f) or ''
    f_facts = self.codebase.files.get(rel)
    last = name.split('.')[-1]
    if last in ('isinstance', 'assertIsInstance') and len(call.args) == 2:
      return ''
    if isinstance(f, cst.Attribute) and f.attr.value == 'create' and local:
      return ''  # the optimizer rules follow it (objects.optimizer_kept)
    if isinstance(f, cst.Attribute) and f.attr.value == 'create':
      # an optimizer's target: only where the optimizer rules make it a
      # TrainState of these parameters (every definition it can be is one
      # they translate); a legacy optimizer keeps a legacy model
      base = flow.values_of(rel, qual, f.value)
      if base and all(v[0] == 'optdef' and v[1] in REWRITTEN_OPTIMIZERS
                      for v in base) and not any(
                          a.keyword is not None or a.star
                          for a in call.args):
        return ''
      return 'the target of an optimizer the upgrade does not rewrite'
    vals = flow.values_of(rel, qual, f)
    if vals and all(v[0] in ('func', 'boundmethod', 'cls', 'wrapped')
                    for v in vals):
      return ''  # a codebase function: its parameter is a place of its own
    if vals and all(v[0] == 'ext' and (
        v[1] in TREE_FUNCTIONS or v[1] in flow_lib.SAME_STRUCTURE
        or v[1] in (f'{t}().{m}' for t in TRAVERSALS
                    for m in TRAVERSAL_METHODS)) for v in vals):
      return ''
    if isinstance(f, cst.Attribute) and f.attr.value in TRAVERSAL_METHODS \
        and f_facts is not None and _is_traversal_expr(f.value, f_facts):
      return ''
    return f'an argument of {name or "a call"}'

  # -- queries --
  def call_class(self, slot, rel):
    """(file, class name) every model of ``slot`` is built of, when one user
    module class without ``.partial`` keywords that ``rel`` can name."""
    key = None
    for v in self.flow.values.get(slot, set()):
      if v[0] == 'none':
        continue
      if v[0] != 'model':
        return None
      k = model_class_of(self.codebase, v)
      if k is None or (key is not None and k != key):
        return None
      key = k
    if key is None or class_expr(self.codebase, rel, key) is None:
      return None
    return key


def _is_traversal_expr(expr, f_facts):
  if isinstance(expr, cst.Call):
    return _qualified(cst_util.dotted(expr.func) or '', f_facts) in TRAVERSALS
  return False


def _qualified(name, f_facts):
  head, _, rest = name.partition('.')
  full = f_facts.imports.get(head)
  if full:
    return f'{full}.{rest}' if rest else full
  return name


def model_class_of(codebase, model_value):
  """(file, class name) of the module a model value was built of: one user
  legacy module class without ``.partial`` keywords the upgrade converts;
  else None."""
  flow = _flow(codebase)
  mods = flow.values.get(model_value[1], set()) if flow else set()
  if len(mods) != 1:
    return None
  (m,) = mods
  if m[0] != 'class' or m[3]:
    return None
  choice, _ = flow_lib.module_choice(codebase, [m])
  if choice is None or choice[0] != 'class':
    return None
  return (m[1], m[2])


def class_expr(codebase, rel, key):
  """How file ``rel`` names the class ``key`` ((file, name)), or None."""
  cls_file, name = key
  if cls_file == rel:
    return name
  f = codebase.files.get(rel)
  if f is None:
    return None
  stem = os.path.splitext(cls_file)[0].replace(os.sep, '/').replace('/', '.')

  def names_file(mod):
    # (the import may name the package above the upgraded tree, or the
    # tree's root may sit above the package)
    return stem == mod or stem.endswith('.' + mod) or mod.endswith(
        '.' + stem)

  for local, full in sorted(f.imports.items()):
    if not full or '.' in local:
      continue
    mod, _, last = full.rpartition('.')
    if last == name and mod and names_file(mod):
      return local  # from pkg.mod import M
    if names_file(full):
      return f'{local}.{name}'  # from pkg import mod
  return None

