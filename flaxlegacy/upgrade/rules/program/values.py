"""What an expression holds, for the program pass: a legacy module class,
an optimizer, a model, a collection -- by the file's imports, the scope's
bindings and what flow.py knows of the codebase; the report line of a
rewrite; argument sources.  A mixin of ``programs.ProgramRewriter``: its
methods read the rewriter's state (``self.f``, ``self.scope``, ...)."""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import flow as flow_lib
from flaxlegacy.upgrade.collectors import aliases as alias_facts
from flaxlegacy.upgrade.collectors import programs as program_facts
from flaxlegacy.upgrade.rules import attention_cache
from flaxlegacy.upgrade.rules import objects
from flaxlegacy.upgrade.rules.program import shared
from flaxlegacy.upgrade.rules.program.shared import MODEL  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.rules.program.shared import OPT  # pylint: disable=g-importing-member


class ValueQueries:
  """What names and expressions hold (the pass's shared helpers)."""

  def _decoded(self, args):
    """``args`` (Args, for a plan) with the legacy cache a model gets --
    the target of an enclosing cache ``mutate()`` block -- given as
    ``True``: the module decodes (its 'cache' collection goes in the
    variables; rules/attention_cache.py)."""
    if not any(st[4] == attention_cache.COLLECTION for st in self._stateful):
      return tuple(args)
    return tuple(
        a.with_changes(value=cst.Name('True'))
        if not (isinstance(a.star, str) and a.star)
        and self._cache_target(a.value) else a for a in args)

  def _decoded_module(self, expr):
    """A module expression (for a plan) whose partial's arguments are
    ``_decoded``."""
    if not (isinstance(expr, cst.Call) and any(
        st[4] == attention_cache.COLLECTION for st in self._stateful)):
      return expr
    args = self._decoded(expr.args)
    if all(a is b for a, b in zip(args, expr.args)):
      return expr
    return expr.with_changes(args=args)

  def _cache_target(self, expr):
    """``expr`` names the target of an enclosing cache ``mutate()``
    block."""
    return isinstance(expr, cst.Name) and any(
        st[4] == attention_cache.COLLECTION and st[1] == expr.value
        for st in self._stateful)

  def note(self, node, what):
    self.ctx.report.rewritten.append(
        {'rule': 'programs', 'line': self.ctx.line(node), 'what': what})

  def _is_module_expr(self, expr):
    """A user legacy module class or module alias (not a legacy layer)."""
    if cst_util.legacy_attr(expr, self.f.nn_prefixes) is not None:
      return False
    if alias_facts.is_module_name(self.codebase, program_facts.class_name(expr)):
      return True
    # self.network, KNOWN_MODELS[name]: every value it holds is one
    return self._flow_info(expr) is not None

  def _qual(self):
    return '.'.join(self._quals)

  def _flow_info(self, expr):
    """The module class every value of ``expr`` is (flow.py), or None."""
    if (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value == 'partial'):
      expr = expr.func.value
    return objects.module_info(self.codebase, self.f.path, self._qual(),
                               expr)

  def _may_hold_module(self, expr):
    """Whether some value of ``expr`` is a legacy module class or layer
    (flow.py): its life cycle calls are legacy even in a file that does not
    import flax.nn (a test that builds models through a library)."""
    flow = getattr(self.codebase, 'flow', None)
    if flow is None:
      return False
    return any(v[0] in ('class', 'layer') for v in flow.values_of(
        self.f.path, self._qual(), expr))

  def _holds_collection(self, expr):
    """Whether ``expr`` holds a legacy ``nn.Collection``: by what flow.py
    says it holds (``with nn.stateful() as s``, returned, passed, in any
    file), whatever its name; where flow.py knows nothing of it, by the
    names the legacy examples give collections (``state``, ``*_state``) in
    a file that imports flax.nn."""
    flow = getattr(self.codebase, 'flow', None)
    values = flow.values_of(self.f.path, self._qual(), expr) if (
        flow is not None) else frozenset({flow_lib.UNKNOWN})
    known = values - {flow_lib.UNKNOWN}
    if known == {flow_lib.COLLECTION} and flow_lib.UNKNOWN not in values:
      return True
    if known and flow_lib.COLLECTION not in known:
      return False  # never a collection: a plain object's as_dict
    # a collection in some runs and something else in others (the name
    # reassigned: ``state = tree_map(f, state.as_dict())``), or nothing
    # known: the names the legacy examples give collections
    return bool(self.nn_file) and shared.is_state_name(expr)

  def _known_module(self, expr):
    """A legacy module class, ``M.partial(...)`` of one, or a name bound
    to such a partial in scope."""
    if (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value == 'partial'):
      return self._known_module(expr.func.value)
    if isinstance(expr, cst.Name) and self.scope.lookup('modvars_',
                                                         expr.value):
      return True
    return self._is_module_expr(expr)

  def is_nn(self, expr, attr):
    return cst_util.legacy_attr(expr, self.f.nn_prefixes) == attr

  def is_optim(self, expr):
    """'Momentum' for ``optim.Momentum``, else None."""
    name = cst_util.dotted(expr) if isinstance(
        expr, (cst.Name, cst.Attribute)) else None
    if not name:
      return None
    for l in self.f.optim_locals:
      if name.startswith(l + '.'):
        return name[len(l) + 1:]
    full = self.f.imports.get(name)
    if full and full.startswith('flax.optim.'):
      return full[len('flax.optim.'):]
    return None

  def _qualify(self, name):
    if not name:
      return None
    head, _, rest = name.partition('.')
    full = self.f.imports.get(head)
    if full is None:
      return name
    return full + ('.' + rest if rest else '')

  def _kept_name(self, node):
    """Why the optimizer or model variable ``node`` (a Name) holds stays
    legacy (flow.py): its uses are not rewritten, and the first one says
    so."""
    key = (self._qual(), node.value)
    if key not in self._kept_names:
      why = objects.name_kept(self.codebase, self.f.path, self._qual(),
                              node.value, self.model_class)
      self._kept_names[key] = why
      if why and not self._flagged(node.value):
        # (a parameter says it where it is defined)
        self.todo(node, f'{node.value!r}: {why}; every place it reaches '
                  'stays legacy: port by hand')
    return self._kept_names[key]

  def _carried_name(self, name):
    """Whether ``name`` holds models that carry their module."""
    key = ('carried', self._qual(), name)
    if key not in self._kept_names:
      self._kept_names[key] = objects.name_carried(
          self.codebase, self.f.path, self._qual(), name)
    return self._kept_names[key]

  def _module_classes_only(self, expr):
    """Whether every value ``expr`` holds is a user legacy module class
    (with any ``.partial`` keywords; some may be unknown: a class the
    codebase is configured with)."""
    vals = objects.values(self.codebase, self.f.path, self._qual(), expr)
    if not vals:
      return False
    kinds = {v[0] for v in vals}
    return 'class' in kinds and kinds <= {'class', 'unknown'}

  def _flagged(self, name):
    """Whether ``name`` is a parameter that already carries a TODO (its
    kind set to None where its function is defined)."""
    s = self.scope
    while s is not None:
      if name in s.kinds:
        return s.kinds[name] is None
      s = s.parent
    return False

  def kind_of(self, expr):
    if isinstance(expr, cst.Name):
      if self._kept_name(expr):
        return None
      if self._carried_name(expr.value):
        return None  # a legacy_model.Model: called as it is
      k = self.scope.kind(expr.value)
      if k is None and not self.scope.has(expr.value) and (
          objects.holds_models(self.codebase, self.f.path, self._qual(),
                               expr)):
        # every value the codebase gives it is an nn.Model it rewrites
        # (flow.py, rules/model_uses.py)
        return MODEL
      if k is None and not self.scope.has(expr.value):
        # every value the codebase gives it is an optimizer it rewrites
        # (a local bound to what a codebase function returns, in a file
        # that need not import flax: flow.py)
        kind, why, unknown = objects.name_kind(
            self.codebase, self.f.path, self._qual(), expr.value,
            self.model_class)
        if kind == 'optimizer' and not why and not unknown:
          return OPT
      return k
    if isinstance(expr, cst.Attribute):
      if expr.attr.value == 'target' and self.kind_of(expr.value) == OPT:
        is_carried, why = objects.carried(self.codebase, self.f.path,
                                          self._qual(), expr)
        if is_carried:
          return None  # a legacy_model.Model: .params and calls as written
        if why is None and not (objects.values(
            self.codebase, self.f.path, self._qual(), expr) or set()) - {
                flow_lib.UNKNOWN} and objects.optimizers_all_carried(
                    self.codebase, self.f.path, self._qual()):
          # an optimizer the facts lose (a struct's .replace(optimizer=)):
          # every optimizer this function creates holds a carried Model
          return None
        return MODEL
      kind, why, unknown = objects.attr_kind(
          self.codebase, self.f.path, self._qual(), expr, self.model_class)
      if kind == 'optimizer' and (not unknown
                                  or expr.attr.value == 'optimizer'):
        return OPT
      if why:
        return None
      if expr.attr.value == 'optimizer' and why is None:
        return OPT
      if kind == 'model' and objects.holds_models(
          self.codebase, self.f.path, self._qual(), expr, self.model_class):
        return MODEL  # self.model: an nn.Model the upgrade rewrites
    if isinstance(expr, cst.Call):
      fn = expr.func
      if isinstance(fn, cst.Attribute):
        if fn.attr.value == 'create' and isinstance(fn.value, cst.Call) and (
            self.is_optim(fn.value.func) or self._user_optdef(fn.value)):
          return OPT
        if fn.attr.value == 'create' and isinstance(fn.value, cst.Name) and (
            self.scope.lookup('optdefs', fn.value.value)
            or self.scope.lookup('user_defs', fn.value.value)):
          return OPT
        if fn.attr.value in ('apply_gradient', 'replicate', 'unreplicate'
                             ) and self.kind_of(fn.value) == OPT:
          return OPT
        if fn.attr.value in ('replicate', 'unreplicate') and expr.args and (
            self.kind_of(expr.args[0].value) == OPT):
          return OPT
    return None

