"""What an expression can hold: names, attributes, subscripts, literals,
calls of library functions (jax transformations, ``SAME_STRUCTURE``),
legacy layers, ``.partial``, optimizers, the aux of ``jax.grad``."""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import layer_table
from flaxlegacy.upgrade.flow_facts import queries
from flaxlegacy.upgrade.flow_facts import shared
from flaxlegacy.upgrade.flow_facts.shared import AUX_WRAPPERS  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.flow_facts.shared import COLLECTION  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.flow_facts.shared import EXT_INSTANCES  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.flow_facts.shared import GINVAL  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.flow_facts.shared import GIN_RESULTS  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.flow_facts.shared import JAX_WRAPPERS  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.flow_facts.shared import FUNCTION  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.flow_facts.shared import NONE  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.flow_facts.shared import NOT_OPTIMIZER_DEFS  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.flow_facts.shared import OPTIMIZER_METHODS  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.flow_facts.shared import OTHER  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.flow_facts.shared import SAME_RETURN  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.flow_facts.shared import SAME_STRUCTURE  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.flow_facts.shared import TRAIN_STATE  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.flow_facts.shared import UNKNOWN  # pylint: disable=g-importing-member


# The branches of ``ExpressionFacts.expr_values``, in the order it tries
# them, each with the node classes it takes (isinstance).
_NAME, _ATTRIBUTE, _CALL, _SUBSCRIPT, _DICT, _LIST_SET, _COMPREHENSION = (
    'name', 'attribute', 'call', 'subscript', 'dict', 'list_set',
    'comprehension')
_TUPLE, _IFEXP, _BOOLEAN, _LITERAL, _LAMBDA, _OTHER = (
    'tuple', 'ifexp', 'boolean', 'literal', 'lambda', 'other')
_BRANCHES = (
    (_NAME, (cst.Name,)), (_ATTRIBUTE, (cst.Attribute,)), (_CALL, (cst.Call,)),
    (_SUBSCRIPT, (cst.Subscript,)), (_DICT, (cst.Dict,)),
    (_LIST_SET, (cst.List, cst.Set)),
    (_COMPREHENSION, (cst.DictComp, cst.ListComp, cst.SetComp,
                      cst.GeneratorExp)),
    (_TUPLE, (cst.Tuple,)), (_IFEXP, (cst.IfExp,)),
    (_BOOLEAN, (cst.BooleanOperation,)),
    (_LITERAL, (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString,
                cst.ConcatenatedString, cst.FormattedString, cst.Comparison,
                cst.BinaryOperation, cst.UnaryOperation)),
    (_LAMBDA, (cst.Lambda,)))
_KINDS = {}  # node class -> its branch


def _kind(t):
  """The branch of ``expr_values`` for nodes of class ``t``, worked out
  once per class: libcst's node classes are ABCs, whose ``isinstance`` is
  a slow call when it fails, and ``expr_values`` is asked of most
  expressions of a codebase, several times over (speed)."""
  kind = next((k for k, classes in _BRANCHES if issubclass(t, classes)),
              _OTHER)
  _KINDS[t] = kind
  return kind


class ExpressionFacts:
  """The values of an expression (a mixin of ``Flow``)."""

  def expr_values(self, rel, qual, expr):
    """The values ``expr`` (a libcst node in scope ``qual`` of ``rel``) can
    hold, with the facts as they stand."""
    kind = _KINDS.get(type(expr))
    if kind is None:
      kind = _kind(type(expr))
    if kind is _NAME:
      if expr.value == 'None':
        return {NONE}
      if expr.value in ('True', 'False'):
        return {OTHER}
      f = self._module_files.get(rel)
      if f is not None and expr.value in f.nn_prefixes:
        return {('nn',)}
      s = self.scopes.get((rel, qual))
      if s is not None and s.cls and expr.value == s.self_name:
        d = self.defs.get((rel, qual))
        if (d is not None and shared.class_level(d.node)
            and self.globals_kind.get((rel, s.cls)) == 'class'):
          # ``cls`` of a classmethod of a legacy module class: that class
          # or a subclass (whichever it is called on)
          return self.legacy_class_and_subclasses(rel,
                                                  s.cls.split('.')[-1])
        return {('instance', rel, s.cls)}
      slot = self.reaching.get(id(expr))
      if slot is not None:
        return set(self.values.get(slot, set()))
      slot = self._name_slot(rel, qual, expr.value)
      if slot is None:
        return {FUNCTION} if expr.value in shared.BUILTINS else {UNKNOWN}
      return set(self.values.get(slot, set()))
    if kind is _ATTRIBUTE:
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
        elif v[0] == 'class' and self.legacy_class_method(
            v[1], v[2], expr.attr.value) is not None:
          # X.build(...): a classmethod of a legacy module class
          d = self.legacy_class_method(v[1], v[2], expr.attr.value)
          out.add(('boundmethod', d.rel, d.qual))
        else:
          out.add(UNKNOWN)
      return out
    if kind is _CALL:
      return self._call_values(rel, qual, expr)
    if kind is _SUBSCRIPT:
      out = set()
      key = shared.subscript_key(expr)
      for v in self.expr_values(rel, qual, expr.value):
        if v[0] == 'container':
          if key is not None and self.literal_dict_keys(v) is not None:
            # d['k'] of a dict whose keys the facts follow: what 'k' and
            # the keys not known here hold, not every key's values
            # (init2winit's pytree_dict['batch_stats'] of a dict that
            # also holds the model under 'flax_module')
            out |= self.values.get(('ck', v[1], key), set())
            out |= self.values.get(('ck', v[1], '*'), set())
          else:
            out |= self.values.get(v[1], set())
        elif v[0] == 'tuple':
          idx = shared.int_index(expr)
          if idx is not None and -v[2] <= idx < v[2]:
            out |= self.values.get((v[1], idx % v[2]), set())
          else:
            for i in range(v[2]):
              out |= self.values.get((v[1], i), set())
        else:
          out.add(UNKNOWN)
      return out
    if kind is _DICT:
      # a dict: one value per literal, its keys and values in slots
      site = ('c', rel, id(expr))
      self.dict_sites.add(site)
      self._add(('keys', site), set())
      for e in expr.elements:
        if isinstance(e, cst.DictElement):
          self._add_key(site, shared.literal_key(e.key),
                        self.expr_values(rel, qual, e.value))
        else:  # {**other, ...}
          self._merge_dict(site, self.expr_values(rel, qual, e.value))
      return {('container', site)}
    if kind is _LIST_SET:
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
    if kind is _COMPREHENSION:
      # {k: M.partial(**c) for k, c in ...}: a table of its element values
      site = ('c', rel, id(expr))
      elt = expr.value if isinstance(expr, cst.DictComp) else expr.elt
      self._add(site, self.expr_values(rel, qual, elt))
      return {('container', site)}
    if kind is _TUPLE:
      if any(isinstance(e, cst.StarredElement) for e in expr.elements):
        return {UNKNOWN}
      site = ('t', rel, id(expr))
      for i, e in enumerate(expr.elements):
        self._add((site, i), self.expr_values(rel, qual, e.value))
      return {('tuple', site, len(expr.elements))}
    if kind is _IFEXP:
      return (self.expr_values(rel, qual, expr.body)
              | self.expr_values(rel, qual, expr.orelse))
    if kind is _BOOLEAN:
      return (self.expr_values(rel, qual, expr.left)
              | self.expr_values(rel, qual, expr.right))
    if kind is _LITERAL:
      return {OTHER}
    if kind is _LAMBDA:
      return {FUNCTION}
    return {UNKNOWN}

  def _legacy_value(self, attr):
    if attr in layer_table.LAYERS:
      return ('layer', attr, frozenset())
    return ('ext', 'flax.nn.' + attr)

  def _call_values(self, rel, qual, call):
    f = call.func
    f_facts = self._module_files.get(rel)
    if f_facts is not None and (
        cst_util.legacy_attr(f, f_facts.nn_prefixes) == 'Model'
        or shared.kept_model(f, f_facts)) and call.args:
      site = ('m', rel, id(call))  # the model's module values
      self._add(site, self.expr_values(rel, qual, call.args[0].value))
      if shared.carried_model(f, f_facts):
        self.carried_sites.add(site)
      return {('model', site)}
    if f_facts is not None and isinstance(f, cst.Attribute) and (
        f.attr.value == 'create') and f_facts.imports.get(
            cst_util.dotted(f.value) or '', cst_util.dotted(f.value)) in (
                TRAIN_STATE, 'flax.training.' + TRAIN_STATE):
      # an earlier upgrade's TrainState: an optimizer of its params=
      target = shared.argument(call, None, 'params')
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
      if shared.partial_of_function(call):
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
      self.dict_sites.add(site)
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
    gin = shared.gin_call(name, f_facts)
    if gin in GIN_RESULTS:
      return {GINVAL}
    if (isinstance(f, cst.Attribute) and f.attr.value == 'as_dict'
        and not call.args) or shared.mutate_call(call):
      # s.as_dict() of a legacy nn.Collection: legacy's flat dict of its
      # state (legacy_model.collection_dict).  Kept a collection here: the
      # facts are by name, and ``s = s.as_dict()`` must not make ``s`` a
      # collection in some runs only.  s.mutate() (as a ``with`` item): its
      # mutable copy, a collection too
      base = self.expr_values(rel, qual, f.value)
      if COLLECTION in base:
        return {COLLECTION} | ({UNKNOWN} if UNKNOWN in base else set())
    if (isinstance(f, cst.Attribute) and f.attr.value == 'copy'
        and not call.args):
      base = self.expr_values(rel, qual, f.value)
      if base and all(self.dict_keys(v) is not None for v in base):
        return set(base)  # (the copy shares the slots: more, never less)
    if (name.split('.')[-1] in JAX_WRAPPERS and name.split('.')[0] in (
        'jax', 'flax') and call.args and call.args[0].keyword is None
        # (not the call of its result: ``jax.grad(f)(x)``, whose name
        # libcst gives as ``jax.grad`` too)
        and not isinstance(f, cst.Call)):
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
        elif f.attr.value == 'values' and self.literal_dict_keys(v) is not None:
          # a dict's values: a container of its own (the dict iterates its
          # keys)
          site = ('c', rel, id(call))
          self._add(site, self.values.get(v[1], set()))
          out.add(('container', site))
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
        arg = shared.argument(call, *SAME_STRUCTURE[v[1]])
        out |= (self.expr_values(rel, qual, arg) if arg is not None
                else {UNKNOWN})
      elif v[0] == 'func':
        forwarded = self._forwarded_result(rel, qual, call, v)
        if forwarded is not None:
          out |= forwarded
          continue
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

  def _forwarded_result(self, rel, qual, call, v):
    """What this call of ``v`` returns when every ``return`` of it is a call
    of one of its parameters (a dispatcher returning ``create_model_fn(M,
    ...)``): the results of the functions this call passes for them, not
    of every call's (trainers passing their own ``create_model``, one
    returning a model, one a ``(model, state)`` tuple).  None otherwise."""
    d = self.defs.get((v[1], v[2]))
    if d is None or d.is_method:
      return None
    returns = self._returns_by_def().get((v[1], v[2]))
    if not returns:
      return None
    out = set()
    for r in returns:
      if not (isinstance(r, cst.Call) and isinstance(r.func, cst.Name)
              and r.func.value in d.pos):
        return None
      k = d.pos.index(r.func.value)
      arg = None
      for i, a in enumerate(call.args):
        if a.star:
          return None
        if a.keyword is None and i == k:
          arg = a.value
        elif a.keyword is not None and a.keyword.value == r.func.value:
          arg = a.value
      if arg is None:
        return None
      for fv in self.expr_values(rel, qual, arg):
        if fv[0] != 'func' or (fv[1], fv[2]) not in self.defs:
          return None
        out |= self.values.get(('r', fv[1], fv[2]), set())
    return out

  def _returns_by_def(self):
    """{(rel, function qual): [returned expressions]} (None: a bare
    ``return``), from the return constraints of collect.py."""
    cached = getattr(self, '_returns_cache', None)
    if cached is None:
      cached = {}
      for c in self.constraints:
        if c[0] == 'assign' and isinstance(c[3], tuple) and c[3][0] == 'r':
          value = c[4]
          cached.setdefault((c[3][1], c[3][2]), []).append(
              value if isinstance(value, cst.CSTNode) else None)
      self._returns_cache = cached
    return cached

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
    for v in queries.usable(self.expr_values(rel, qual, target), 'partial',
                            self):
      if v[0] == 'class':
        out.add(('class', v[1], v[2], v[3] | frozenset(keys)))
      elif v[0] == 'layer':
        out.add(('layer', v[1], v[2] | frozenset(keys)))
      else:
        out.add(UNKNOWN)
    return out
