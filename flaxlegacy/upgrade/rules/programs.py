"""Rules for the code around module definitions (program level).

Runs as a pass before the module rules, on the legacy source, and rewrites
the program-level legacy API into linen + optax:

* model life cycle: ``M.init_by_shape(rng, [(shape, dtype)])`` /
  ``M.create_by_shape`` / ``M.init(rng, x)`` / ``M.create(rng, x)`` ->
  ``M(...).init(rng, ...)['params']`` (the parameter tree keeps its legacy
  names: the module rules keep legacy auto-names); ``nn.Model(M, params)``
  -> ``params``; ``model.params`` -> ``model``; a call ``model(x)`` ->
  ``state.apply_fn({'params': model}, x)`` where the model comes from a
  TrainState in scope, else ``M().apply({'params': model}, x)`` with the one
  module class the codebase builds models of;
* ``with nn.stateful(s) as t:`` around model calls -> ``apply`` with
  ``{**s}`` variables and ``mutable=['batch_stats']``, the new state
  assigned to ``t``; ``nn.stateful(s, mutable=False)`` -> ``apply`` with the
  state, nothing mutable; ``with nn.stateful() as t:`` around an init ->
  ``t`` = the non-parameter collections of the init; ``with
  nn.stochastic(rng):`` -> ``rngs={'dropout': rng}`` on the model calls;
* optimizers: ``optim.X(...).create(target)`` ->
  ``train_state.TrainState.create(apply_fn=..., params=target, tx=...)``
  with plain optax where its numbers equal legacy (table ``OPTAX``), else
  the legacy rule from ``flaxlegacy.migrate.legacy_optax`` (plain optax,
  same constructor arguments; table ``LEGACY_OPTAX``);
  ``optax.inject_hyperparams`` where the codebase passes ``learning_rate``
  per step; ``optim.MultiOptimizer((optim.ModelParamTraversal(f), opt),
  ...)`` -> ``optax.multi_transform`` labelled by
  ``legacy_optax.traversal_labels(f, ...)``; a user-written ``OptimizerDef``
  subclass stays (TODO) and its ``create`` uses ``as_optax()``; ``opt.target`` -> ``opt.params``; ``opt.state.step`` ->
  ``opt.step``; ``opt.apply_gradient(g)`` -> ``opt.apply_gradients(grads=g)``;
  ``opt.optimize(loss_fn)`` -> ``jax.value_and_grad`` + ``apply_gradients``;
  ``opt.replicate()`` / ``unreplicate()`` -> ``flax.jax_utils``;
* checkpoints: ``checkpoints.restore_checkpoint(d, opt)`` of a TrainState ->
  ``flaxlegacy.migrate.upgraded.restore_checkpoint(d, opt)`` (plain flax
  + serialization, importable with ``FLAXLEGACY=off``), which also
  reads a checkpoint the legacy program wrote (converted at load);
  ``checkpoints.save_checkpoint`` -> ``legacy_checkpoints.save_checkpoint``,
  which writes legacy's file format (one msgpack file per step) rather than
  today's default Orbax directory;
* ``flax.training.lr_schedule`` stays (today's flax still has it, same
  values); ``optim.DynamicScale`` ->
  ``flax.training.dynamic_scale.DynamicScale``.

Which names hold what is tracked per function (``Scope``): assignments from
the calls above, parameters named ``optimizer`` / ``model`` (the legacy
examples' convention), and the first parameter of a loss function passed to
``optimize`` / ``jax.grad`` / ``jax.value_and_grad`` of a ``.target``.
Anything not certain keeps its code and gets a TODO.
"""

import builtins
import keyword
import os
import re

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import facts as facts_lib
from flaxlegacy.upgrade import flow as flow_lib
from flaxlegacy.upgrade import walk
from flaxlegacy.upgrade.collectors import aliases as alias_facts
from flaxlegacy.upgrade.collectors import optimizer_defs as optdef_facts
from flaxlegacy.upgrade.collectors import programs as program_facts
from flaxlegacy.upgrade.collectors.programs import LEGACY_OPTAX  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.collectors.programs import LIFECYCLE  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.collectors.programs import MOMENTUM_WITH_DECAY  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.collectors.programs import OPTAX  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.collectors.programs import OPTAX_FIXED  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.collectors.programs import TX_RULES  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.rules import attention_cache
from flaxlegacy.upgrade.rules import lifecycle_runtime
from flaxlegacy.upgrade.rules import model_uses
from flaxlegacy.upgrade.rules import objects
from flaxlegacy.upgrade.rules import optimizer_defs

OPT, MODEL, STRUCT = 'optimizer', 'model', 'struct'

USER_OPTDEF = optimizer_defs.KEEP
OPT_PARAM_NAMES = ('optimizer', 'opt', 'new_optimizer')
# a model that carries its module (objects.model_carried): the helper it
# becomes, imported under this name
MODEL_HELPER_IMPORT = 'from flaxlegacy.migrate import upgraded as legacy_model'

MODEL_PARAM_NAMES = ('model',)
# typing constructs whose subscripts are types (a type alias outside an
# annotation: ``F = Callable[[nn.Model], Any]``)
TYPING_GENERICS = frozenset((
    'Callable', 'Type', 'Optional', 'Union', 'Mapping', 'MutableMapping',
    'Sequence', 'MutableSequence', 'List', 'Dict', 'Tuple', 'Set',
    'FrozenSet', 'Iterable', 'Iterator', 'Generator', 'Collection',
    'Awaitable', 'Coroutine', 'AsyncIterator', 'DefaultDict', 'Deque'))


def _e(src):
  return cst.parse_expression(src)


def _s(src):
  return cst.parse_statement(src)


# --- facts ---------------------------------------------------------------------


def relevant(file_facts, codebase=None, path=None):
  """Whether the program pass has anything to look at in this file: its
  words, or nn.Model values that the codebase hands to it (a library
  function reading ``model.params``)."""
  if getattr(file_facts, 'program_words', True):
    return True
  u = model_uses.uses(codebase) if codebase is not None else None
  return u is not None and path in u.files


def _codebase_model_class(codebase, path=None):
  """The one module class the program's models are built of, or None
  (objects.codebase_model_class)."""
  return objects.codebase_model_class(codebase, path)


def _rel_of(codebase, file_facts):
  for rel, f in codebase.files.items():
    if f is file_facts:
      return rel
  return None


def _codebase_per_step_lr(codebase):
  return any(getattr(f, 'per_step_lr', False) for f in codebase.files.values())


# --- the pass ------------------------------------------------------------------


class Scope:

  def __init__(self, parent=None):
    self.parent = parent
    self.kinds = {}
    self.apply_of = {}  # model name -> source of an apply function
    self.state_of = {}  # model name -> optimizer name it came from
    self.optdefs = {}  # name -> legacy optimizer class (value now optax)
    self.modvars = set()  # names bound to X.partial(...) of a legacy module
    self.traversals = {}  # names bound to optim.ModelParamTraversal(f)
    self.user_defs = {}  # names bound to a user OptimizerDef instance
    # names bound to a TrainState made of a target not known to be a
    # parameter tree (apply_fn not known either)
    self.bare_states = {}

  def kind(self, name):
    s = self
    while s is not None:
      if name in s.kinds:
        return s.kinds[name]
      s = s.parent
    # The legacy examples' naming convention, for values that come from
    # functions the pass does not follow.
    if name in OPT_PARAM_NAMES:
      return OPT
    if name in MODEL_PARAM_NAMES:
      return MODEL
    return None

  def has(self, name):
    """Whether a scope here decided ``name``'s kind (None included)."""
    s = self
    while s is not None:
      if name in s.kinds:
        return True
      s = s.parent
    return False

  def lookup(self, table, name):
    if table == 'modvars_':
      s = self
      while s is not None:
        if name in s.modvars:
          return True
        s = s.parent
      return False
    s = self
    while s is not None:
      d = getattr(s, table)
      if name in d:
        return d[name]
      s = s.parent
    return None

  def any_optimizer(self):
    s = self
    while s is not None:
      for n, k in s.kinds.items():
        if k == OPT:
          return n
      s = s.parent
    return None


class ProgramRewriter(cst_util.TodoComments, walk.FastTransformer):
  """The program-level pass over one legacy file."""

  def __init__(self, ctx):
    super().__init__()
    self.ctx = ctx
    self._todos = []
    self.f = ctx.facts
    self.codebase = ctx.codebase
    self._kept_names = {}  # (scope, name) -> why its object is kept
    # optimizer definitions whose create(...) stays legacy: they stay too
    self._kept_defs = None
    self._kept_def_calls = set()  # ids of those optim.X(...) calls
    self.model_class = _codebase_model_class(ctx.codebase,
                                             _rel_of(ctx.codebase, ctx.facts))
    self.nn_file = bool(ctx.facts.nn_prefixes)
    self.per_step_lr = _codebase_per_step_lr(ctx.codebase)
    self.scope = Scope()
    self._quals = []  # enclosing class / function names (flow.py scopes)
    self.imports = set()  # statements to add
    self._multi_src = {}  # id(optim.MultiOptimizer call) -> optax source
    self.rewrites = []
    self._stateful = []  # stack of (state expr src or None, target, mutable)
    self._stochastic = []
    self._assign_values = set()  # ids of assigned Call nodes (statements)
    self._optdef_values = set()  # ids of optim.X(...) assigned to a name
    self._unknown_calls = set()  # ids of model calls with a TODO
    self._rewritten_calls = set()  # ids of model calls leave_Call rewrote
    self._traversals = None  # see _traversal_objects
    self.module = None  # the file's module (run sets it)
    self._in_type = 0  # inside a type annotation / typing subscript
    self._type_subscripts = set()
    self._bare_creates = set()  # ids of create(...) calls of unknown targets

  # -- helpers --
  def _traversal_objects(self):
    """ids of the ``ModelParamTraversal(f)`` calls of this file whose
    traversal the code uses itself (``.update`` / ``.iterate``), computed
    once."""
    if self._traversals is None:
      self._traversals = _traversal_objects(self.module, self)
    return self._traversals

  def _argsrc(self, a):
    star = a.star if isinstance(a.star, str) else ''
    kw = f'{a.keyword.value}=' if a.keyword is not None else ''
    if not star and self._cache_target(a.value):
      # the legacy cache a model gets: the module decodes (its 'cache'
      # collection goes in the variables; rules/attention_cache.py)
      return f'{kw}True'
    return f'{star}{kw}{self.ctx.code_of(a.value)}'

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
    return bool(self.nn_file) and _is_state_name(expr)

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
        if objects.carried(self.codebase, self.f.path, self._qual(),
                           expr)[0]:
          return None  # a legacy_model.Model: .params and calls as written
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

  def module_ctor(self, cls_expr):
    """Source of a linen module instance for a legacy class expression."""
    code = self.ctx.code_of(cls_expr)
    if (isinstance(cls_expr, cst.Call)
        and cst_util.dotted(cls_expr.func) == 'functools.partial'
        and cls_expr.args and not cls_expr.args[0].keyword
        and not cls_expr.args[0].star):
      # models.M.partial(...), already rewritten by leave_Call
      inner = self.ctx.code_of(cls_expr.args[0].value)
      args = ', '.join(self._argsrc(a) for a in cls_expr.args[1:])
      return f'{inner}({args})'
    if (isinstance(cls_expr, cst.Call) and isinstance(cls_expr.func,
                                                        cst.Attribute)
        and cls_expr.func.attr.value == 'partial'):
      inner = self.ctx.code_of(cls_expr.func.value)
      args = ', '.join(self._argsrc(a) for a in
                       cls_expr.args)
      return f'{inner}({args})'
    return f'{code}()'

  def _model_apply_src(self, model_call):
    """Source of the apply function of ``nn.Model(M, params)``: ``None``
    for ``nn.Model(None, params)`` (a model with no module: nothing to
    apply, a bag of parameters for an optimizer), else ``M().apply``."""
    module = model_call.args[0].value if model_call.args else None
    if module is None or (isinstance(module, cst.Name)
                          and module.value == 'None'):
      return 'None'
    return self.module_ctor(module) + '.apply'

  def apply_fn_for(self, model_name):
    """Source of the apply function for a model variable, or None."""
    src = self.scope.lookup('apply_of', model_name)
    if src:
      return src
    opt = self.scope.lookup('state_of', model_name)
    if opt:
      return f'{opt}.apply_fn'
    cls = objects.model_apply_class(self.codebase, self.f.path, self._qual(),
                                    cst.Name(model_name))
    if cls is not None:
      # every model it holds is of this class (flow.py)
      return f'{cls}().apply'
    cls = self._model_class_expr()
    if cls is not None:
      # the one module class models are built of, bound in this file
      return f'{cls}().apply'
    return None

  def _model_class_expr(self):
    """How this file names the model class (``M``, ``models.M``), or None."""
    cls = self.model_class
    if not cls:
      return None
    if cls in self.f.modules or cls in self.f.imports:
      return cls
    info = self.codebase.modules.get(cls)
    if info is None:
      return None
    stem = os.path.splitext(info.file)[0].replace(os.sep, '.')
    for local, full in sorted(self.f.imports.items()):
      if full and (stem == full or stem.endswith('.' + full)) and (
          '.' not in local):
        return f'{local}.{cls}'
    return None

  # -- scopes --
  def visit_ClassDef(self, node):
    self._quals.append(node.name.value)
    # legacy module bodies are the module rules' (rules/modules.py); a
    # user-written optimizer definition becomes a function returning an
    # optax transformation (rules/optimizer_defs.py), or stays with a TODO
    if node.name.value in self.f.user_optdefs:
      plan = self._plan(self.f, node.name.value)
      if isinstance(plan, optdef_facts.Plan):
        return True  # its methods' bodies get the program rules too
      self.todo(node, USER_OPTDEF.format(node.name.value, plan))
      return False
    return node.name.value not in self.f.modules

  def leave_ClassDef(self, original_node, updated_node):
    self._quals.pop()
    plan = (self._plan(self.f, original_node.name.value)
            if original_node.name.value in self.f.user_optdefs else None)
    if not isinstance(plan, optdef_facts.Plan):
      return updated_node
    self.note(original_node, f'{plan.name}(OptimizerDef) -> a function '
              'returning an optax GradientTransformation')
    return optimizer_defs.convert(self, original_node, updated_node, plan)

  def _plan(self, file_facts, name):
    """The ``optdef_facts.Plan`` of the user definition ``name`` of
    ``file_facts``, or why it is not translated."""
    plan = getattr(file_facts, 'optdef_plans', {}).get(name)
    if not isinstance(plan, optdef_facts.Plan):
      return plan or 'it is not a direct OptimizerDef subclass'
    subs = sorted(c for f in self.codebase.files.values()
                  for c, bases in getattr(f, 'class_bases', {}).items()
                  if name in bases)
    if subs:
      return (f'{subs[0]} derives from it (a function has no subclasses)')
    return plan

  def is_optimizer_state(self, node):
    """Whether ``node`` names legacy ``flax.optim.OptimizerState``."""
    name = cst_util.dotted(node) if isinstance(
        node, (cst.Name, cst.Attribute)) else None
    return program_facts.qualified(name, self.f.imports) in (
        'flax.optim.OptimizerState', 'flax.optim.base.OptimizerState')

  def _user_class(self, func):
    """(FileFacts, class name) of the user OptimizerDef ``func`` names --
    ``X`` of this file or imported by name, ``module.X`` of an imported
    file of the codebase -- or None."""
    if isinstance(func, cst.Name):
      if func.value in self.f.user_optdefs:
        return self.f, func.value
      full = self.f.imports.get(func.value, '')
      mod, _, cls = full.rpartition('.')
    elif isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
      mod, cls = self.f.imports.get(func.value.value, ''), func.attr.value
    else:
      return None
    if not mod:
      return None
    comps = mod.split('.')
    here = os.path.dirname(self.f.path)

    def common(path):  # how many trailing module names the path shares
      parts = os.path.splitext(path)[0].split(os.sep)
      n = 0
      while n < min(len(parts), len(comps)) and parts[-1 - n] == comps[-1 - n]:
        n += 1
      return n

    files = [f for p, f in self.codebase.files.items()
             if common(p) and cls in getattr(f, 'user_optdefs', ())]
    files.sort(key=lambda f: (-common(f.path),
                              os.path.dirname(f.path) != here))
    return (files[0], cls) if files else None

  def _user_optdef(self, expr):
    """The user OptimizerDef class ``expr`` (a call of it) builds, or None."""
    if isinstance(expr, cst.Call):
      found = self._user_class(expr.func)
      if found is not None:
        return found[1]
    return None

  def _translated(self, expr):
    """The Plan of the user definition ``expr`` (a call) builds, if the
    upgrade translates it to a function returning optax, else None."""
    if not isinstance(expr, cst.Call):
      return None
    found = self._user_class(expr.func)
    if found is None:
      return None
    plan = self._plan(*found)
    return plan if isinstance(plan, optdef_facts.Plan) else None

  def visit_FunctionDef(self, node):
    self._quals.append(node.name.value)
    if node.name.value in self.f.modules:
      return False
    self.scope = Scope(self.scope)
    ps = node.params
    plist = list(ps.posonly_params) + list(ps.params) + list(ps.kwonly_params)
    opt_in_scope = self.scope.any_optimizer()
    for i, p in enumerate(plist):
      n = p.name.value
      # what the codebase passes it (flow.py): an optimizer whatever its
      # name; one in some runs and something else in others: a TODO
      kind, why, unknown = objects.param_kind(
          self.codebase, self.f.path, self._qual(), n, self.model_class)
      if why:
        self.todo(node, f'parameter {n!r}: {why}; the upgrade rewrites '
                  'a legacy object only where every value agrees: port this '
                  'function by hand')
        self.scope.kinds[n] = None  # not by its name either
        continue
      if kind == 'optimizer' and (not unknown or n in OPT_PARAM_NAMES):
        self.scope.kinds[n] = OPT
        continue
      if kind == objects.CARRIED:
        # a legacy_model.Model: its calls stay as they are
        self.scope.kinds[n] = None
        continue
      if kind == 'optimizer':
        # an optimizer from the codebase's calls, something unknown from
        # others: neither rewritten as a TrainState nor left silently
        self.todo(node, f'parameter {n!r}: it holds a legacy optimizer in '
                  'the calls the codebase makes, and values the upgrade '
                  'cannot see in others; port this function by hand')
        self.scope.kinds[n] = None
        continue
      src = self.f.loss_fns.get(node.name.value)
      if (src is not None and i == 0 and src.isidentifier()
          and self.scope.parent.kind(src) != OPT):
        self.scope.kinds[n] = None  # not a model by its name either
        continue  # the optimizer it is differentiated at stays legacy
      if n in OPT_PARAM_NAMES:
        self.scope.kinds[n] = OPT
      elif n in MODEL_PARAM_NAMES or (node.name.value in self.f.loss_fns
                                      and i == 0):
        self.scope.kinds[n] = MODEL
        if node.name.value in self.f.loss_fns:
          # the TrainState whose params the loss is differentiated at (read
          # when the loss runs, after the enclosing function bound it)
          self.scope.state_of[n] = self.f.loss_fns[node.name.value]
    return True

  def leave_FunctionDef(self, original_node, updated_node):
    self._quals.pop()
    if original_node.name.value in self.f.modules:
      return updated_node
    self.scope = self.scope.parent
    return updated_node

  # -- assignments: types, tuple-producing calls --
  def _kept_definitions(self):
    """objects.kept_definitions for this file (computed once)."""
    if self._kept_defs is None:
      self._kept_defs = objects.kept_definitions(self.codebase, self.f.path,
                                                 self.model_class)
    return self._kept_defs

  def visit_Assign(self, node):
    v = node.value
    self._assign_values.add(id(v))
    if (self._kept_definitions() and len(node.targets) == 1
        and isinstance(node.targets[0].target, cst.Name)
        and isinstance(v, cst.Call) and (self._qual(),
                                          node.targets[0].target.value)
        in self._kept_defs):
      self._kept_def_calls.add(id(v))
    if (len(node.targets) == 1 and isinstance(node.targets[0].target,
                                              cst.Name)
        and isinstance(v, cst.Call) and isinstance(v.func, (cst.Name,
                                                            cst.Attribute))
        and self.is_optim(v.func) in TX_RULES):
      self.scope.optdefs[node.targets[0].target.value] = self.is_optim(v.func)
    if (len(node.targets) == 1 and isinstance(node.targets[0].target,
                                              cst.Name)
        and self._user_optdef(v)):
      # True: translated (the name holds an optax transformation now)
      self.scope.user_defs[node.targets[0].target.value] = (
          'translated' if self._translated(v) else 'kept')
    if (len(node.targets) == 1 and isinstance(node.targets[0].target,
                                              cst.Name)
        and isinstance(v, cst.Call) and isinstance(v.func, (cst.Name,
                                                            cst.Attribute))
        and self.is_optim(v.func) == 'ModelParamTraversal'):
      self.scope.traversals[node.targets[0].target.value] = True
      self._optdef_values.add(id(v))
    if (len(node.targets) == 1 and isinstance(node.targets[0].target,
                                              cst.Name)
        and isinstance(v, cst.Call) and isinstance(v.func, cst.Attribute)
        and v.func.attr.value == 'partial'
        and self._is_module_expr(v.func.value)):
      self.scope.modvars.add(node.targets[0].target.value)
    if (len(node.targets) == 1 and isinstance(node.targets[0].target,
                                              cst.Name)
        and isinstance(v, cst.Call) and isinstance(v.func, cst.Name)
        and v.func.value in self.f.partial_helpers):
      self.scope.modvars.add(node.targets[0].target.value)
    targets = [t.target for t in node.targets]
    if len(targets) != 1:
      return True
    t = targets[0]
    if isinstance(t, cst.Name):
      k = self.kind_of(v)
      if k:
        self.scope.kinds[t.value] = k
        if k == MODEL and isinstance(v, cst.Attribute):
          self.scope.state_of[t.value] = self.ctx.code_of(v.value)
      if isinstance(v, cst.Call) and self.is_nn(v.func, 'Model'):
        self.scope.kinds[t.value] = MODEL
        self.scope.apply_of[t.value] = self._model_apply_src(v)
    if isinstance(v, cst.Call):
      self._builder_call(t, v)
    if isinstance(t, (cst.Tuple, cst.List)) and isinstance(v, cst.Call):
      fn = v.func
      names = [e.value.value if isinstance(e.value, cst.Name) else None
               for e in t.elements]
      if isinstance(fn, cst.Attribute) and fn.attr.value in LIFECYCLE and (
          not lifecycle_runtime.runtime_lifecycle(self, v)):
        if len(names) == 2 and names[1]:
          self.scope.kinds[names[1]] = MODEL
          self.scope.apply_of[names[1]] = self.module_ctor(fn.value
                                                           ) + '.apply'
      if isinstance(fn, cst.Attribute) and fn.attr.value == 'optimize' and (
          self.kind_of(fn.value) == OPT) and names and names[0]:
        self.scope.kinds[names[0]] = OPT
    return True

  def _builder_call(self, t, call):
    """``model[, state] = create_model(args)``: the model's module, from
    the module expression of create_model with the arguments put in."""
    fn, prefix, builders = call.func, '', None
    if isinstance(fn, cst.Name):
      builders = self.f.model_builders
      name = fn.value
    elif isinstance(fn, cst.Attribute) and isinstance(fn.value, cst.Name):
      mod = self.f.imports.get(fn.value.value, '')
      for path, ff in self.codebase.files.items():
        if path.replace('/', '.').rsplit('.py', 1)[0].endswith(mod) and mod:
          builders = getattr(ff, 'model_builders', {})
      prefix = fn.value.value + '.'
      name = fn.attr.value
    if not builders or name not in builders:
      return
    params, src, index = builders[name]
    binding = {}
    for i, a in enumerate(call.args):
      if a.star:
        return
      if a.keyword is None and i < len(params):
        binding[params[i]] = self.ctx.code_of(a.value)
      elif a.keyword is not None:
        binding[a.keyword.value] = self.ctx.code_of(a.value)

    def sub(m):
      word = m.group(0)
      if word in binding:
        return f'({binding[word]})'
      if word in params:
        raise KeyError(word)
      if prefix and not keyword.iskeyword(word) and word not in dir(
          builtins):
        return prefix + word
      return word
    try:
      expr = re.sub(r'(?<![.\w])[A-Za-z_]\w*(?!\w)(?!\s*=(?!=))', sub,
                    src)
    except KeyError:
      return  # a parameter with its default: not rewritten
    if index is None:
      target = t if isinstance(t, cst.Name) else None
    elif isinstance(t, (cst.Tuple, cst.List)) and len(t.elements) > index:
      target = t.elements[index].value
    else:
      target = None
    if not isinstance(target, cst.Name):
      return
    self.scope.kinds[target.value] = MODEL
    self.scope.apply_of[target.value] = self.module_ctor(_e(expr)) + '.apply'

  def leave_Assign(self, original_node, updated_node):
    # x = opt_def.create(target) of a target not known to be parameters
    if id(original_node.value) in self._bare_creates and len(
        original_node.targets) == 1 and isinstance(
            original_node.targets[0].target, cst.Name):
      self.scope.bare_states[original_node.targets[0].target.value] = True
    return updated_node

  def leave_SimpleStatementLine(self, original_node, updated_node):
    if len(updated_node.body) != 1:
      return updated_node
    stmt = updated_node.body[0]
    orig = original_node.body[0]
    if (isinstance(orig, cst.Expr) and isinstance(orig.value, cst.Call)
        and isinstance(orig.value.func, cst.Attribute)
        and orig.value.func.attr.value in LIFECYCLE
        and self._is_module_expr(orig.value.func.value)):
      # M.init_by_shape(rng, specs, ...) for its effect alone (a test
      # that it raises): linen's init, the result dropped as before
      init = self._init_expr(orig.value)
      if init is not None:
        self.note(orig, f'{orig.value.func.attr.value} -> linen init')
        return updated_node.with_changes(body=[stmt.with_changes(
            value=_e(init))])
      return updated_node
    if isinstance(stmt, cst.Assign) and len(stmt.targets) == 1:
      new = self._assign(orig, stmt, original_node)
      if new is not None:
        return cst.FlattenSentinel([
            (s.with_changes(leading_lines=updated_node.leading_lines)
             if i == 0 else s) for i, s in enumerate(new)])
    return updated_node

  def _assign(self, orig, stmt, line):
    t = stmt.targets[0].target
    v = stmt.value
    ov = orig.value
    if not isinstance(ov, cst.Call) or not isinstance(ov.func, cst.Attribute):
      return self._stateful_assign(orig, stmt, line)
    attr = ov.func.attr.value
    runtime = lifecycle_runtime.lifecycle_assign(self, ov, v, t)
    if runtime is not None:
      self.imports.add(MODEL_HELPER_IMPORT)
      return [_s(runtime)]
    if attr in ('init', 'create') and isinstance(t, (cst.Tuple, cst.List)) \
        and len(t.elements) == 2 and ov.args and (
            self.f.nn_prefixes or self._may_hold_module(ov.func.value)) and not (
            self._is_module_expr(ov.func.value) or (
                isinstance(ov.func.value, cst.Name)
                and self.scope.lookup('modvars_', ov.func.value.value))) \
        and cst_util.legacy_attr(ov.func.value, self.f.nn_prefixes) is None:
      # ``_, params = X.init(rng, ...)``: the pair is legacy's life cycle;
      # X is not known to hold one legacy module class (a functools.partial
      # built elsewhere, a class from outside)
      if attr == 'init' and self._module_classes_only(ov.func.value) and (
          not any(a.star for a in ov.args)) and ov.args[0].keyword is None:
        # every value it holds is a legacy module class, of different
        # fields: split the keywords by the class's fields at run time
        self.imports.add(MODEL_HELPER_IMPORT)
        args = ', '.join(self._argsrc(a) for a in stmt.value.args) if (
            isinstance(stmt.value, cst.Call) and len(stmt.value.args) == len(
                ov.args)) else ', '.join(self._argsrc(a) for a in ov.args)
        x = self.ctx.code_of(ov.func.value)
        self.note(line, 'X.init(rng, ...) of module classes known at run '
                  'time -> legacy_model.init_module')
        return [_s(f'{self.ctx.code_of(t)} = legacy_model.init_module({x}, '
                   f'{args})\n')]
      # otherwise left, never silently
      self.todo(ov, f'{self.ctx.code_of(ov.func)}(...) with a pair target: '
                'legacy module life cycle on a value not known here to hold '
                'one legacy module class; port by hand to '
                "M(...).init(rng, ...)['params']")
      return None
    # _, model = M.create_by_shape(rng, specs)  /  M.init_by_shape
    if attr in LIFECYCLE and isinstance(t, (cst.Tuple, cst.List)) and len(
        t.elements) == 2 and (self._is_module_expr(ov.func.value) or (
                isinstance(ov.func.value, cst.Name)
                and self.scope.lookup('modvars_', ov.func.value.value))):
      first = t.elements[0].value
      second = self.ctx.code_of(t.elements[1].value)
      init = self._init_expr(v if isinstance(v, cst.Call) and isinstance(
          v.func, cst.Attribute) else ov)
      if init is None:
        return None
      out = []
      collect = self._stateful[-1] if self._stateful else None
      with_output = not (isinstance(first, cst.Name) and first.value == '_')
      params = "_variables['params']"
      if attr.startswith('create') and objects.model_carried(
          self.codebase, ('mc', self.f.path, id(ov))):
        # the model goes where its parameters alone cannot follow it: it
        # carries its module, whatever M holds at run time (the keywords
        # given here are the init's, as legacy's model kept only M)
        module = (v.func.value if isinstance(v, cst.Call) and isinstance(
            v.func, cst.Attribute) else ov.func.value)
        self.imports.add(MODEL_HELPER_IMPORT)
        params = (f'legacy_model.Model({self.ctx.code_of(module)}, '
                  f'{params})')
        if not (with_output or (collect is not None and collect[0] is None
                                and collect[1])):
          out.append(_s(f'_variables = {init}\n'))
          with_output = None  # _variables is bound
      if with_output:
        # legacy init returned (output or its shape, params)
        init = init.replace('.init(', '.init_with_output(', 1)
        out.append(_s(f'{self.ctx.code_of(first)}, _variables = {init}\n'))
      if collect is not None and collect[0] is None and collect[1]:
        if with_output is False:
          out.append(_s(f'_variables = {init}\n'))
        out.append(_s(f"{second} = {params}\n"))
        keep = ("k != 'params'" if collect[4] != attention_cache.COLLECTION
                else f"k == {attention_cache.COLLECTION!r}")
        out.append(_s(f'{collect[1]} = {{k: v for k, v in _variables.items()'
                      f' if {keep}}}\n'))
        collect[3] = True
      elif with_output is not False:
        out.append(_s(f"{second} = {params}\n"))
      else:
        out.append(_s(f"{second} = {init}['params']\n"))
      self.note(line, f'{attr} -> linen init' + (
          '' if params.startswith('_') else ' (the model carries its module: '
          'legacy_model.Model)'))
      return out
    # new_opt, loss[, aux] = opt.optimize(loss_fn)
    if attr == 'optimize' and isinstance(t, (cst.Tuple, cst.List)) and (
        self.kind_of(ov.func.value) == OPT) and ov.args:
      names = [self.ctx.code_of(e.value) for e in t.elements]
      src = v if isinstance(v, cst.Call) and len(v.args) == len(
          ov.args) else ov
      opt = self.ctx.code_of(ov.func.value)
      loss_fn = self.ctx.code_of(src.args[0].value)
      extra = [a for a in src.args[1:]]
      if len(names) == 3:
        vg = (f'({names[1]}, {names[2]}), _grad = jax.value_and_grad('
              f'{loss_fn}, has_aux=True)({opt}.params)\n')
      elif len(names) == 2:
        vg = (f'{names[1]}, _grad = jax.value_and_grad({loss_fn})'
              f'({opt}.params)\n')
      else:
        return None
      apply = self._apply_gradients(opt, '_grad', extra, ov)
      if apply is None:
        return None
      self.imports.add('import jax')
      self.note(line, 'optimizer.optimize -> jax.value_and_grad + '
                'apply_gradients')
      return [_s(vg), _s(f'{names[0]} = {apply}\n')]
    return self._stateful_assign(orig, stmt, line)

  def _init_expr(self, call):
    """``M(...).init(rng, *inputs)`` source for a legacy lifecycle call."""
    attr = call.func.attr.value
    ctor = self.module_ctor(call.func.value)
    args = list(call.args)
    if not args:
      return None
    rng = self.ctx.code_of(args[0].value)
    if attr in ('init_by_shape', 'create_by_shape'):
      if len(args) < 2:
        return None
      specs = _specs(self.ctx.code_of(args[1].value))
      if specs is None:
        self.todo(call, f'{attr} input specs: not a literal list of shapes '
                  'and (shape, dtype) pairs, or a spec that could be either')
        return None
      self.imports.add('import jax.numpy as jnp')
      inputs = ', '.join(_spec_input(s, d) for s, d in specs)
      rest = [a for a in args[2:]]
    else:
      if any(a.star == '**' for a in args):
        # a splatted dict holds fields and __call__ arguments: which, only
        # its keys at run time can tell
        self.todo(call, f'{attr} with **kwargs: its keys may be fields '
                  '(constructor) or __call__ arguments; port by hand')
        return None
      inputs = ', '.join(self._argsrc(a) for a in args[1:]
                         if a.keyword is None)
      rest = [a for a in args[1:] if a.keyword is not None]
    info = alias_facts.root_info(self.codebase, None,
                             program_facts.class_name(call.func.value))
    if info is None:
      info = self._flow_info(call.func.value)
    if info is None and isinstance(call.func.value, cst.Name):
      info = self.codebase.modules.get(self.model_class or '')
    if info is None and any(a.keyword is not None
                            and a.keyword.value != 'name' for a in rest):
      # keywords at init are fields or __call__ arguments: which, only
      # the class can tell (a guess is silently wrong code)
      self.todo(call, f'{attr} with keyword arguments of a module class not '
                'known here: they may be fields (constructor) or __call__ '
                'arguments; port by hand')
      return None
    # name=: legacy init's module name, linen's constructor attribute
    fields = (set(info.fields) if info is not None else set()) | {'name'}
    field_kw = [a for a in rest if a.keyword is not None
                and a.keyword.value in fields]
    if field_kw:
      # hyper-parameters given at init are linen fields
      extra = ', '.join(self._argsrc(a) for a in field_kw)
      ctor = (ctor[:-1] + (', ' if not ctor.endswith('()') else '') + extra
              + ')')
    kw = ''.join(', ' + self._argsrc(a) for a in rest
                 if a.keyword is not None and a not in field_kw)
    return f'{ctor}.init({rng}{", " if inputs else ""}{inputs}{kw})'

  def _apply_gradients(self, opt, grads, extra_args, node=None):
    """``opt.apply_gradients(grads=...)`` source, the per-step learning
    rate set in the optax state's hyperparams; None (with a TODO on
    ``node``) when the call passes another per-step argument: the optax
    transformation built elsewhere does not take it per step, and dropping
    it would change the numbers silently."""
    lr = None
    for a in extra_args:
      if a.keyword is not None and a.keyword.value == 'learning_rate':
        lr = self.ctx.code_of(a.value)
      elif node is not None:
        what = (f'{a.keyword.value}=' if a.keyword is not None
                else ('**' if a.star == '**' else '*' if a.star else ''))
        method = (node.func.attr.value if isinstance(node, cst.Call)
                  and isinstance(node.func, cst.Attribute)
                  else 'apply_gradient')
        self.todo(node, f'optimizer.{method}(..., {what}...): a '
                  'hyper-parameter set per step other than learning_rate is '
                  'not carried into the optax transformation (the upgrade '
                  'sets only learning_rate per step); build the '
                  'transformation with optax.inject_hyperparams and set it '
                  'in opt_state.hyperparams by hand')
        return None
    if lr is None:
      return f'{opt}.apply_gradients(grads={grads})'
    return (f"{opt}.replace(opt_state={opt}.opt_state._replace(hyperparams="
            f"{{**{opt}.opt_state.hyperparams, 'learning_rate': {lr}}}))"
            f".apply_gradients(grads={grads})")

  # -- nn.stateful / nn.stochastic --
  def visit_With(self, node):
    for item in node.items:
      call = item.item
      if isinstance(call, cst.Call) and self.is_nn(call.func, 'stateful'):
        state = (self.ctx.code_of(call.args[0].value)
                 if call.args and call.args[0].keyword is None else None)
        mutable = True
        for a in call.args:
          if a.keyword is not None and a.keyword.value == 'mutable':
            mutable = self.ctx.code_of(a.value) != 'False'
        target = (self.ctx.code_of(item.asname.name) if item.asname else None)
        self._stateful.append([state, target, mutable, False,
                               'batch_stats', False])
      cache = attention_cache.mutate_block(self, item)
      if cache is not None:
        # a legacy attention cache block: its model call or init threads
        # the 'cache' collection (rules/attention_cache.py)
        state = (self.ctx.code_of(cache[1]) if cache[1] is not None
                 else None)
        self._stateful.append([state, item.asname.name.value, True, False,
                               attention_cache.COLLECTION, False])
      if isinstance(call, cst.Call) and self.is_nn(call.func, 'stochastic'):
        self._stochastic.append(self.ctx.code_of(call.args[0].value))
    return True

  def leave_With(self, original_node, updated_node):
    handled, items = [], []
    for item, new_item in zip(original_node.items, updated_node.items):
      call = item.item
      if isinstance(call, cst.Call) and self.is_nn(call.func, 'stateful'):
        handled.append(self._stateful.pop())
      elif attention_cache.mutate_block(self, item) is not None:
        handled.append(self._stateful.pop())
      elif isinstance(call, cst.Call) and self.is_nn(call.func, 'stochastic'):
        self._stochastic.pop()
        # Kept as a plain-JAX block, for the keys program code draws with
        # nn.make_rng() (flaxlegacy.migrate.upgraded).
        self.imports.add('from flaxlegacy.migrate import upgraded as '
                         'legacy_rng')
        items.append(new_item.with_changes(item=new_item.item.with_changes(
            func=_e('legacy_rng.stochastic'))))
      else:
        items.append(new_item)
    if not handled:
      return updated_node.with_changes(items=cst_util.clean(items))
    if not all(h[3] for h in handled):
      runtime = lifecycle_runtime.runtime_block(
          self, original_node, updated_node, handled, items,
          lambda item: isinstance(item.item, cst.Call) and self.is_nn(
              item.item.func, 'stateful'), cst_util.clean)
      if runtime is not None:
        return runtime
      what = ('legacy attention cache block' if any(
          h[4] == attention_cache.COLLECTION for h in handled)
              else 'nn.stateful block')
      self.todo(original_node, f'{what}: no model call or init '
                'inside that the upgrade could thread the state through')
      return updated_node
    self.note(original_node, 'nn.stateful -> apply arguments')
    if items:
      return updated_node.with_changes(items=cst_util.clean(items))
    body = list(updated_node.body.body)
    if body:
      body[0] = body[0].with_changes(leading_lines=list(
          updated_node.leading_lines) + list(body[0].leading_lines))
    return cst.FlattenSentinel(body)

  def _module_method(self, name):
    """True if ``name`` is an ``@nn.module_method`` of the model class."""
    infos = ([self.codebase.modules.get(self.model_class)] if self.model_class
             else list(self.codebase.modules.values()))
    return any(i is not None and getattr(i.methods.get(name), 'module_method',
                                         False) for i in infos)

  def _model_call(self, call, updated=None):
    """``apply`` source for a model call (a Call node), or None."""
    f = call.func
    method = None
    if isinstance(f, cst.Attribute) and self._module_method(f.attr.value) and (
        (isinstance(f.value, cst.Name) and self.kind_of(f.value) == MODEL)
        or (isinstance(f.value, cst.Attribute)
            and f.value.attr.value == 'target'
            and self.kind_of(f.value.value) == OPT)):
      # model.generate(z) of a legacy @nn.module_method
      method = f.attr.value
      f = f.value
    carried = False
    if isinstance(f, cst.Name) and self._stateful and method is None and (
        self._carried_name(f.value) and not self._kept_name(f)):
      # a model that carries its module, called in an nn.stateful / cache
      # block: applied with the block's collections (its keywords split
      # between fields and __call__ at run time, as its plain calls are)
      carried = True
      model = f.value
      self.imports.add(MODEL_HELPER_IMPORT)
      apply = 'legacy_model.apply_model'
    elif isinstance(f, cst.Name) and self.kind_of(f) == MODEL:
      model = f.value
      apply = self.apply_fn_for(model)
      if apply is not None and apply == f'{self._model_class_expr()}().apply':
        # the codebase's one model class, by convention: not if the model
        # the codebase passes here is of another class (flow.py)
        why = objects.model_call_conflict(self.codebase, self.f.path,
                                          self._qual(), model,
                                          self.model_class)
        if why and id(call) not in self._unknown_calls:
          self._unknown_calls.add(id(call))
          self.todo(call, f'model call: {why}; apply it with its module '
                    'by hand')
          return None
    elif isinstance(f, cst.Attribute) and f.attr.value == 'target' and (
        self.kind_of(f.value) == OPT):
      model = self.ctx.code_of(f)
      apply = f'{self.ctx.code_of(f.value)}.apply_fn'
      model = f'{self.ctx.code_of(f.value)}.params'
    elif (isinstance(f, cst.Attribute) and method is None
          and objects.holds_models(self.codebase, self.f.path, self._qual(),
                                   f)):
      # self.model(x): an attribute every value of which is an nn.Model
      # the upgrade rewrites, all of one class (flow.py)
      model = self.ctx.code_of(f)
      cls = objects.model_apply_class(self.codebase, self.f.path,
                                      self._qual(), f)
      apply = None if cls is None else f'{cls}().apply'
    else:
      return None
    if apply is None:
      if id(call) in self._unknown_calls:
        return None
      self._unknown_calls.add(id(call))
      self.todo(call, 'model call: the module of this model is not known '
                'here; apply it with module.apply')
      return None
    variables = f"{{'params': {model}}}"
    st = self._stateful[-1] if self._stateful else None
    if st is not None and st[0] is not None:
      variables = f"{{'params': {model}, **{st[0]}}}"
    if updated is None or not isinstance(updated, cst.Call) or len(
        updated.args) != len(call.args):
      updated = call
    fields = set()
    info = None
    if apply.endswith('().apply') and re.fullmatch(
        r'[\w.]+', apply[:-len('().apply')]):
      # the class this model was built of (nn.Model(pkg.M, params) here)
      info = alias_facts.root_info(self.codebase, None,
                               apply[:-len('().apply')].split('.')[-1])
    if info is None and not carried:
      info = self.codebase.modules.get(self.model_class or '')
    if info is not None:
      fields = set(info.fields) | ({info.var_kw} if info.var_kw else set())
    field_args = [a for a in updated.args if a.keyword is not None
                  and a.keyword.value in fields]
    if apply == f'{self._model_class_expr()}().apply':
      # the class with its fields' defaults: fine unless the program
      # builds its models with other values
      bound = set(self.codebase.partial_kwargs.get(self.model_class, ()))
      # and the .partial keywords of the modules the models this call can
      # hold were built of, wherever that was (flow.py)
      bound |= objects.model_partial_keywords(
          self.codebase, self.f.path, self._qual(), call.func)
      left = sorted(bound - {a.keyword.value for a in field_args})
      if left and id(call) not in self._unknown_calls:
        self._unknown_calls.add(id(call))
        what = ('keywords not known here (**)' if '**' in left else
                ', '.join(left))
        self.todo(call, f'{self.model_class}() here has its fields\' '
                  f'defaults, but the program builds it with {what}: pass '
                  'the same values (or use the TrainState\'s apply_fn)')
    if field_args and apply.endswith('().apply'):
      # the class itself: its fields at construction (a required field
      # has no default for ``M()`` to clone from)
      apply = (f"{apply[:-len('().apply')]}("
               f"{', '.join(self._argsrc(a) for a in field_args)}).apply")
    elif field_args:
      if not apply.endswith('.apply'):
        # apply_fn is a bound ``module.apply``: its module, with the
        # fields this call sets
        apply = apply + '.__self__'
      else:
        apply = apply[:-len('.apply')]
      apply = (f"{apply}.clone({', '.join(self._argsrc(a) for a in field_args)})"
               '.apply')
    args = ', '.join(self._argsrc(a) for a in updated.args
                     if a not in field_args)
    extra = ''
    if method is not None:
      extra += f', method={method!r}'
    if self._stochastic:
      extra += f", rngs={{'dropout': {self._stochastic[-1]}}}"
      for h in [self._stochastic]:
        pass
    mutable = st is not None and st[2] and st[1] is not None
    if mutable:
      extra += f", mutable=[{st[4]!r}]"
    return apply, variables, args, extra, mutable, st

  def _stateful_assign(self, orig, stmt, line):
    ov = orig.value
    if not isinstance(ov, cst.Call) or id(ov) in self._rewritten_calls:
      return None  # not a call, or leave_Call rewrote it already
    r = self._model_call(ov, stmt.value)
    if r is None:
      return None
    apply, variables, args, extra, mutable, st = r
    if self._stochastic:
      self._mark_stochastic()
    src = f'{apply}({variables}, {args}{extra})'
    t = self.ctx.code_of(stmt.targets[0].target)
    if mutable:
      st[3] = True
      self.note(line, 'model call in nn.stateful -> apply, mutable')
      return [_s(f'{t}, {st[1]} = {src}\n')]
    if st is not None:
      st[3] = True
    self.note(line, 'model call -> apply')
    return [_s(f'{t} = {src}\n')]

  def _mark_stochastic(self):
    pass

  # -- expressions --
  def leave_Call(self, original_node, updated_node):
    f = original_node.func
    if self._stateful:
      lifecycle_runtime.carried_call(self, original_node)
    new = attention_cache.initialize_cache(self, original_node, updated_node)
    if new is not None:
      return new
    if not original_node.args and (self.is_nn(f, 'make_rng')
                                   or self.is_nn(f, 'is_stochastic')):
      self.imports.add('from flaxlegacy.migrate import upgraded as '
                       'legacy_rng')
      self.note(original_node, f'nn.{f.attr.value}() in program code -> '
                'legacy_rng')
      return _e(f'legacy_rng.{f.attr.value}()')
    # models.M.partial(...) at program level (rules/modules.py rewrites
    # the bare-name form M.partial)
    if (isinstance(f, cst.Attribute) and f.attr.value == 'partial'
        and isinstance(f.value, cst.Attribute)
        and self._is_module_expr(f.value)):
      self.imports.add('import functools')
      self.note(original_node, 'M.partial -> functools.partial')
      return updated_node.with_changes(
          func=_e('functools.partial'),
          args=cst_util.clean([cst.Arg(value=updated_node.func.value)]
                      + list(updated_node.args)))
    # M.call(params, *inputs) of a known module (or a local holding its
    # partial): apply with the parameters
    if (isinstance(f, cst.Attribute) and f.attr.value == 'call'
        and original_node.args and not any(
            a.star or a.keyword is not None for a in original_node.args)
        and self._known_module(f.value)):
      info = self._flow_info(f.value) or alias_facts.root_info(
          self.codebase, None, program_facts.class_name(f.value))
      n = len(original_node.args) - 1
      if info is None or info.kind != 'class' or info.var_pos or not set(
          info.params[:n]) <= set(info.call):
        # positional arguments past the inputs are fields in linen
        self.todo(original_node, f'{self.ctx.code_of(f)}(params, ...): its '
                  'arguments are not known here to be the module\'s inputs '
                  '(they may be fields); use M(fields).apply({"params": '
                  'params}, inputs)')
        return updated_node
      ctor = self.module_ctor(f.value)
      params = self.ctx.code_of(original_node.args[0].value).rstrip(', ')
      inputs = ''.join(', ' + self._argsrc(a)
                       for a in original_node.args[1:])
      self.note(original_node, 'M.call(params, ...) -> M().apply')
      return _e(f"{ctor}.apply({{'params': {params}}}{inputs})")
    # state.as_dict() of a legacy nn.Collection: the state is a dict now
    if (isinstance(f, cst.Attribute) and f.attr.value == 'as_dict'
        and not original_node.args and self._holds_collection(f.value)):
      self.note(original_node, 'nn.Collection.as_dict() -> the dict')
      return updated_node.func.value
    # optim.X(...).create(target)
    if isinstance(f, cst.Attribute) and f.attr.value == 'create' and (
        isinstance(f.value, cst.Call)):
      name = self.is_optim(f.value.func)
      if name is not None:
        return self._create(original_node, f.value, name) or updated_node
    # UserDef(...).create(target): the translated definition is the optax
    # transformation (rules/optimizer_defs.py); one kept stays, through
    # as_optax()
    if isinstance(f, cst.Attribute) and f.attr.value == 'create' and (
        self._user_optdef(f.value)):
      tx = cst.Module([]).code_for_node(updated_node.func.value)
      if not self._translated(f.value):
        tx = f'{tx}.as_optax()'
      return self._create(original_node, None, 'Optimizer',
                          tx=tx) or updated_node
    if isinstance(f, cst.Attribute) and f.attr.value == 'create' and (
        isinstance(f.value, cst.Name)) and self.scope.lookup(
            'user_defs', f.value.value):
      tx = f.value.value
      if self.scope.lookup('user_defs', f.value.value) != 'translated':
        tx = f'{tx}.as_optax()'
      return self._create(original_node, None, 'Optimizer',
                          tx=tx) or updated_node
    # UserDef(...) of a translated definition, where the learning rate is
    # set per step: optax.inject_hyperparams around it
    plan = self._translated(original_node)
    if plan is not None and self.per_step_lr:
      return self._inject_user(original_node, updated_node, plan)
    # optimizer_def.create(target), optimizer_def = optim.X(...)
    if isinstance(f, cst.Attribute) and f.attr.value == 'create' and (
        isinstance(f.value, cst.Name)) and self.scope.lookup(
            'optdefs', f.value.value):
      name = self.scope.lookup('optdefs', f.value.value)
      return self._create(original_node, None, name,
                          tx=f.value.value) or updated_node
    # optimizer_def.create(target), every value of optimizer_def a legacy
    # definition, which this pass makes an optax transformation (flow.py)
    if isinstance(f, cst.Attribute) and f.attr.value == 'create' and (
        isinstance(f.value, (cst.Name, cst.Attribute))) and len(
            original_node.args) == 1:
      names = objects.optdef_names(self.codebase, self.f.path, self._qual(),
                                   f.value)
      if names and names <= TX_RULES:
        return self._create(original_node, None, 'Optimizer',
                            tx=self.ctx.code_of(f.value)) or updated_node
    # make_optimizer_def(...).create(model): a definition from a function
    if isinstance(f, cst.Attribute) and f.attr.value == 'create' and len(
        original_node.args) == 1 and (self.kind_of(
            original_node.args[0].value) == MODEL or objects.carried(
                self.codebase, self.f.path, self._qual(),
                original_node.args[0].value)[0]) and isinstance(
                    f.value, cst.Call) and _returns_optax(self, f.value):
      return self._create(original_node, None, 'Optimizer', tx=self.ctx.code_of(
          updated_node.func.value)) or updated_node
    # optim.X(...) alone: the optax transformation
    name = self.is_optim(f) if isinstance(f, (cst.Name, cst.Attribute)
                                          ) else None
    if name is not None and (id(original_node) in self._kept_def_calls or (
        id(original_node) in self._kept_definitions())):
      # the optimizer it creates stays legacy (a TODO there): so does it
      return updated_node
    if name == 'ModelParamTraversal' or (
        isinstance(f, (cst.Name, cst.Attribute))
        and self._qualify(cst_util.dotted(f))
        == 'flax.optim.ModelParamTraversal'
        and id(original_node) in self._traversal_objects()):
      return self._traversal(original_node, updated_node)
    if name == 'MultiOptimizer':
      tx = self._multi(original_node, updated_node)
      if tx is not None:
        self._multi_src[id(original_node)] = tx
        self.note(original_node, 'optim.MultiOptimizer -> '
                  'optax.multi_transform')
        return _e(tx)
      return updated_node
    if name in TX_RULES:
      tx = self._tx(original_node, original_node, name)
      if tx is not None:
        self.note(original_node, f'optim.{name}(...) -> {tx.split("(")[0]}')
        return _e(tx)
    if isinstance(f, cst.Attribute) and self.kind_of(f.value) == OPT:
      opt = updated_node.func.value
      opt_src = cst.Module([]).code_for_node(opt)
      if f.attr.value == 'apply_gradient' and original_node.args:
        grads = self.ctx.code_of(original_node.args[0].value).rstrip(', ')
        apply = self._apply_gradients(opt_src, grads, original_node.args[1:],
                                      original_node)
        if apply is None:
          return updated_node
        if isinstance(f.value, cst.Name) and self.scope.lookup(
            'bare_states', f.value.value):
          # created here with apply_fn=None: its target is not known to be
          # a model's parameter tree (sam's test optimizes a bare array)
          self.todo(original_node, 'apply_gradients: this optimizer was '
                    'created on a target not known to be a parameter tree; '
                    'TrainState.apply_gradients refuses a bare array (it '
                    'tests `in` on it): wrap the target in a dict')
        self.note(original_node, 'apply_gradient -> apply_gradients')
        return _e(apply)
      if f.attr.value in ('replicate', 'unreplicate') and not (
          original_node.args):
        self.imports.add('from flax import jax_utils')
        self.note(original_node, f'optimizer.{f.attr.value}() -> jax_utils')
        return _e(f'jax_utils.{f.attr.value}({opt_src})')
    # model(x) in expression position (not an assignment handled above)
    r = self._model_call(original_node, updated_node)
    if r is not None:
      apply, variables, args, extra, mutable, st = r
      if mutable and id(original_node) in self._assign_values:
        return updated_node  # leave_SimpleStatementLine threads the state
      if mutable:
        self.todo(original_node, 'model call inside nn.stateful outside a '
                  'plain assignment: the new state is not threaded back')
        return updated_node
      if st is not None:
        st[3] = True
      self.note(original_node, 'model call -> apply')
      self._rewritten_calls.add(id(original_node))
      return _e(f'{apply}({variables}, {args}{extra})')
    # checkpoints.restore_checkpoint(dir, opt)
    name = cst_util.dotted(f) if isinstance(f, (cst.Name, cst.Attribute)
                                             ) else None
    full = self._qualify(name)
    if full == 'flax.training.checkpoints.restore_checkpoint' and len(
        original_node.args) >= 2:
      self.imports.add('from flaxlegacy.migrate import upgraded as '
                       'legacy_checkpoints')
      self.note(original_node, 'restore_checkpoint -> also reads legacy '
                'checkpoints')
      return updated_node.with_changes(
          func=_e('legacy_checkpoints.restore_checkpoint'))
    if full == 'flax.training.checkpoints.save_checkpoint':
      self.imports.add('from flaxlegacy.migrate import upgraded as '
                       'legacy_checkpoints')
      self.note(original_node, 'save_checkpoint -> keeps the legacy file '
                'format')
      return updated_node.with_changes(
          func=_e('legacy_checkpoints.save_checkpoint'))
    if isinstance(f, cst.Name) or isinstance(f, cst.Attribute):
      if self.is_optim(f) == 'DynamicScale':
        self.imports.add('from flax.training import dynamic_scale as '
                         'dynamic_scale_lib')
        return updated_node.with_changes(
            func=_e('dynamic_scale_lib.DynamicScale'))
    # isinstance(x, nn.Model)
    if isinstance(f, cst.Name) and f.value in ('isinstance', 'assertIsInstance'
                                                ) or (
        isinstance(f, cst.Attribute) and f.attr.value == 'assertIsInstance'):
      if len(original_node.args) == 2 and self.is_nn(
          original_node.args[1].value, 'Model'):
        is_carried, why = objects.carried(
            self.codebase, self.f.path, self._qual(),
            original_node.args[0].value)
        if why:
          self.todo(original_node, f'isinstance(..., nn.Model): {why}; '
                    'port by hand')
          return updated_node
        args = list(updated_node.args)
        if is_carried:
          self.imports.add(MODEL_HELPER_IMPORT)
          args[1] = args[1].with_changes(value=_e('legacy_model.Model'))
        else:
          args[1] = args[1].with_changes(value=cst.Name('dict'))
        return updated_node.with_changes(args=args)
    # nn.Model(M, params)(x): called where it is made
    inner = original_node.func
    if (isinstance(inner, cst.Call) and self.is_nn(inner.func, 'Model')
        and len(inner.args) == 2 and not any(a.star for a in inner.args)):
      return self._inline_model_call(original_node, updated_node)
    # nn.Model(M, params) -> params
    if self.is_nn(f, 'Model') and len(original_node.args) == 2:
      if objects.model_carried(self.codebase,
                               ('m', self.f.path, id(original_node)),
                               self.model_class):
        # the model goes where its calls could not become M().apply, or
        # its module is known only at run time: it carries its module,
        # and every use stays as it is (objects.model_carried)
        if any(a.keyword is not None or a.star
               for a in original_node.args):
          self.todo(original_node, 'nn.Model(...) with keywords: port by '
                    'hand to legacy_model.Model(module, params)')
          return updated_node
        self.imports.add(MODEL_HELPER_IMPORT)
        self.note(original_node, 'nn.Model(M, params) -> legacy_model.Model '
                  '(it carries its module)')
        return updated_node.with_changes(func=_e('legacy_model.Model'))
      reach = objects.model_reach(self.codebase, self.f.path, original_node,
                                  self.model_class)
      if reach and self._known_module(original_node.args[0].value):
        # the model goes where its calls could not become M().apply: both
        # places keep the legacy code, with a TODO (uses: rules/modules)
        self.todo(original_node, 'nn.Model(M, params): this model reaches '
                  f'{"; ".join(reach)}, which cannot take its parameters '
                  'alone; the upgrade rewrites it only where every place '
                  'agrees: pass the module and its params there by hand')
        return updated_node
      if not self._known_module(original_node.args[0].value):
        # params alone would lose M: the model's calls elsewhere (a
        # parameter, an attribute ...) would call a dict
        self.todo(original_node, 'nn.Model(M, params): M is not known here '
                  'to be a legacy module class, so the calls of this model '
                  'cannot become M().apply(params, ...); port by hand')
        return updated_node
      self.note(original_node, 'nn.Model(M, params) -> params')
      return updated_node.args[1].value
    return updated_node

  def _inline_model_call(self, original, updated):
    """``nn.Model(M, params)(x)`` -> ``M().apply({'params': params}, x)``
    where M is known and the call needs no state, rng or field (else a
    TODO: the model made here has no other use to rewrite)."""
    inner = original.func
    module = inner.args[0].value
    if objects.model_carried(self.codebase, ('m', self.f.path, id(inner)),
                             self.model_class):
      # legacy_model.Model(M, params)(...) (leave_Call rewrote the inner
      # call): it applies M, known at run time, as legacy did
      return updated
    info = self._flow_info(module) or alias_facts.root_info(
        self.codebase, None, program_facts.class_name(module))
    fields = set(info.fields) | ({info.var_kw} if info.var_kw else set()) if (
        info is not None) else set()
    if (not self._known_module(module) or self._stateful or self._stochastic
        or any(a.star or (a.keyword is not None
                          and a.keyword.value in fields)
               for a in original.args)):
      self.todo(original, 'nn.Model(M, params)(...): a model called where '
                'it is made; the upgrade rewrites it only for a known module '
                'called on its inputs, outside nn.stateful / nn.stochastic: '
                "port by hand to M().apply({'params': params}, ...)")
      return updated
    new_inner = updated.func
    params = (new_inner.args[1].value if isinstance(new_inner, cst.Call)
              and len(new_inner.args) == 2 else inner.args[1].value)
    ctor = self.module_ctor(new_inner.args[0].value if isinstance(
        new_inner, cst.Call) and len(new_inner.args) == 2 else module)
    args = ', '.join(self._argsrc(a) for a in updated.args)
    self.note(original, 'nn.Model(M, params)(...) -> M().apply')
    return _e(f"{ctor}.apply({{'params': {self.ctx.code_of(params)}}}"
              f"{', ' + args if args else ''})")

  def _qualify(self, name):
    if not name:
      return None
    head, _, rest = name.partition('.')
    full = self.f.imports.get(head)
    if full is None:
      return name
    return full + ('.' + rest if rest else '')

  def _create(self, node, opt_call, name, tx=None):
    if not node.args:
      return None
    why = objects.optimizer_kept(self.codebase,
                                 ('o', self.f.path, id(node)),
                                 self.model_class)
    if why:
      self.todo(node, f'optimizer: {why}; the upgrade keeps it legacy, and '
                'every place it reaches')
      return None
    target = node.args[0].value
    target_src = self.ctx.code_of(target)
    if tx is None:
      tx = self._tx(node, opt_call, name)
    if tx is None:
      return None
    apply = None
    is_carried, why = objects.carried(self.codebase, self.f.path,
                                      self._qual(), target)
    if why:
      self.todo(node, f'optimizer target: {why}; port by hand')
      return None
    if is_carried:
      # its params are the Model; apply_fn calls it
      self.imports.add(MODEL_HELPER_IMPORT)
      apply = 'legacy_model.apply_model'
    elif isinstance(target, cst.Name):
      apply = self.apply_fn_for(target.value)
    if apply is None:
      apply = 'None'
      self._bare_creates.add(id(node))
      self.todo(node, 'TrainState.apply_fn: the module of this model is not '
                'known here; apply it with module.apply (and if the target '
                'is a bare array, not a dict of parameters, '
                'TrainState.apply_gradients refuses it: wrap it in a dict)')
    self.imports.add('from flax.training import train_state')
    self.note(node, f'optim.{name}(...).create -> TrainState')
    return _e(f'train_state.TrainState.create(apply_fn={apply}, '
              f'params={target_src}, tx={tx})')

  def _tx(self, node, opt_call, name):
    """optax source for ``optim.<name>(...)`` (the call node), or None."""
    if name in LEGACY_OPTAX:
      return self._legacy_tx(node, opt_call, name, LEGACY_OPTAX[name])
    if name == 'MultiOptimizer':
      return self._multi_src.get(id(opt_call))
    if name not in OPTAX:
      self.todo(node, f'optim.{name}: no optax transformation with the same '
                'numbers is known to the upgrade; port by hand (a legacy '
                'definition gives one: optimizer_def.as_optax())')
      return None
    fn, table = OPTAX[name]
    kw = self._bind_args(node, opt_call, name, tuple(table),
                         'no rewrite for this argument')
    if kw is None:
      return None
    decay = _nonzero(kw.get('weight_decay'))
    if self.per_step_lr or kw.get('learning_rate') is None:
      if name == 'Momentum' and decay:
        # a chain has no hyperparams to set: one legacy_optax state instead
        return self._legacy_tx(node, opt_call, name, MOMENTUM_WITH_DECAY)
      self.imports.add('import optax')
      inner = []
      for k, (ok, default) in table.items():
        v = kw.get(k, default)
        if k == 'learning_rate' and v is None:
          v = '0.0'  # set per step with apply_gradients
        if v is not None:
          inner.append(f'{ok}={v}')
      inner += OPTAX_FIXED.get(name, ())
      tx = f"optax.inject_hyperparams({fn})({', '.join(inner)})"
    else:
      self.imports.add('import optax')
      inner = [kw['learning_rate']]
      for k, (ok, default) in table.items():
        v = kw.get(k, default)
        if k == 'learning_rate' or v is None:
          continue
        inner.append(f'{ok}={v}')
      inner += OPTAX_FIXED.get(name, ())
      tx = f"{fn}({', '.join(inner)})"
    if name == 'Adam' and decay:
      # optax.adam(...) or optax.inject_hyperparams(optax.adam)(...)
      tx = re.sub(r'\boptax\.adam(?=[()])', 'optax.adamw', tx, count=1)
    elif name == 'Adam':
      tx = re.sub(r',? ?weight_decay=[^,)]*', '', tx)
    if name == 'Momentum' and decay:
      tx = tx.replace(f', weight_decay={kw["weight_decay"]}', '')
      tx = f'optax.chain(optax.add_decayed_weights({kw["weight_decay"]}), {tx})'
    elif name == 'Momentum':
      tx = re.sub(r',? ?weight_decay=[^,)]*', '', tx)
    return tx

  def _inject_user(self, original, updated, plan):
    """``optax.inject_hyperparams(UserDef, static_args=...)(...)``: the
    translated definition with its learning rate settable per step (every
    other parameter static, as legacy branched on them in Python)."""
    args = list(updated.args)
    if plan.var_args or 'learning_rate' not in plan.params or any(
        a.star for a in args):
      self.todo(original, f'{plan.name}(...): the program sets the learning '
                'rate per step, and this constructor has no learning_rate '
                'parameter given in a form optax.inject_hyperparams can set')
      return updated
    pos = [a for a in args if a.keyword is None]
    given = len(pos) > plan.params.index('learning_rate') or any(
        a.keyword is not None and a.keyword.value == 'learning_rate'
        for a in args)
    static = [repr(p) for p in plan.params if p != 'learning_rate']
    static = '(' + ', '.join(static) + (',' if len(static) == 1 else '') + ')'
    inner = [self._argsrc_new(a) for a in args]
    if not given:
      inner.append('learning_rate=0.0')  # set per step
    self.imports.add('import optax')
    self.note(original, f'{plan.name}(...) -> optax.inject_hyperparams')
    func = cst.Module([]).code_for_node(updated.func)
    return _e(f'optax.inject_hyperparams({func}, static_args={static})'
              f'({", ".join(inner)})')

  def _argsrc_new(self, a):
    """Source of an argument of an updated (rewritten) call."""
    star = a.star if isinstance(a.star, str) else ''
    kw = f'{a.keyword.value}=' if a.keyword is not None else ''
    return f'{star}{kw}{cst.Module([]).code_for_node(a.value)}'

  def _traversal(self, original, updated):
    """``optim.ModelParamTraversal(f)`` -> ``f``: the filter itself, which
    ``legacy_optax.traversal_labels`` reads (with the legacy paths); a
    traversal the code updates or iterates itself -> today's
    ``flax.traverse_util.ModelParamTraversal(f)`` (same paths, on the
    parameter dict a model became)."""
    args = updated.args
    if id(original) in self._traversal_objects():
      self.imports.add('import flax.traverse_util')
      self.note(original, 'optim.ModelParamTraversal -> '
                'flax.traverse_util.ModelParamTraversal')
      return updated.with_changes(
          func=_e('flax.traverse_util.ModelParamTraversal'))
    if len(args) != 1 or args[0].keyword is not None or args[0].star:
      self.todo(original, 'optim.ModelParamTraversal call form')
      return updated
    self.note(original, 'optim.ModelParamTraversal(f) -> f')
    return args[0].value

  def _multi(self, original, updated):
    """``optim.MultiOptimizer((traversal, opt), ...)`` ->
    ``optax.multi_transform`` with legacy_optax.traversal_labels."""
    if self.per_step_lr:
      self.todo(original, 'optim.MultiOptimizer with hyper-parameters set per '
                'step: optax.multi_transform has no hyperparams to set')
      return None
    filters, txs = [], []
    for o, u in zip(original.args, updated.args):
      if (o.keyword is not None or o.star or not isinstance(
          o.value, (cst.Tuple, cst.List)) or len(o.value.elements) != 2
          or any(isinstance(e, cst.StarredElement)
                 for e in o.value.elements)):
        self.todo(original, 'optim.MultiOptimizer takes (traversal, '
                  'optimizer) pairs written out here')
        return None
      (trav, opt), (u_trav, u_opt) = (o.value.elements, u.value.elements)
      trav, opt = trav.value, opt.value
      is_traversal = (isinstance(trav, cst.Call) and isinstance(
          trav.func, (cst.Name, cst.Attribute)) and self.is_optim(
              trav.func) == 'ModelParamTraversal') or (
                  isinstance(trav, cst.Name)
                  and self.scope.lookup('traversals', trav.value))
      is_tx = (isinstance(opt, cst.Call) and isinstance(
          opt.func, (cst.Name, cst.Attribute)) and self.is_optim(
              opt.func) in (set(OPTAX) | set(LEGACY_OPTAX))) or (
                  isinstance(opt, cst.Name)
                  and self.scope.lookup('optdefs', opt.value))
      u_opt_src = cst.Module([]).code_for_node(u_opt.value)
      if not is_traversal or not is_tx or 'optim.' in u_opt_src:
        self.todo(original, 'optim.MultiOptimizer: a pair is not a '
                  'ModelParamTraversal and a built-in optimizer known here')
        return None
      filters.append(cst.Module([]).code_for_node(u_trav.value))
      txs.append(u_opt_src)
    if not txs:
      self.todo(original, 'optim.MultiOptimizer without pairs')
      return None
    self.imports.add('import optax')
    self.imports.add('from flaxlegacy.migrate import legacy_optax')
    items = ', '.join(f"'{i}': {t}" for i, t in enumerate(txs))
    return (f"optax.multi_transform({{{items}, 'frozen': optax.set_to_zero()"
            f"}}, legacy_optax.traversal_labels({', '.join(filters)}))")

  def _bind_args(self, node, opt_call, name, params, unknown):
    """``{legacy parameter: argument source}`` of ``optim.<name>(...)``
    against the legacy constructor's ``params`` (in order), or None with a
    TODO (``unknown``: why a keyword outside ``params`` is refused)."""
    args = [] if opt_call is None else list(opt_call.args)
    if any(a.star for a in args):
      self.todo(node, f'optim.{name}(*...): the arguments are not known here')
      return None
    pos = [a for a in args if a.keyword is None]
    if len(pos) > len(params):
      self.todo(node, f'optim.{name}: more positional arguments than the '
                'legacy constructor takes')
      return None
    kw = {p: self.ctx.code_of(a.value).rstrip(', ')
          for p, a in zip(params, pos)}
    for a in args:
      if a.keyword is not None:
        if a.keyword.value not in params:
          self.todo(node, f'optim.{name}({a.keyword.value}=...): {unknown}')
          return None
        kw[a.keyword.value] = self.ctx.code_of(a.value).rstrip(', ')
    return kw

  def _legacy_tx(self, node, opt_call, name, rule):
    """``legacy_optax.<rule>(...)`` for ``optim.<name>(...)``, or None."""
    fn, params = rule
    kw = self._bind_args(node, opt_call, name, params,
                         'not a parameter of the legacy constructor')
    if kw is None:
      return None
    self.imports.add('from flaxlegacy.migrate import legacy_optax')
    if self.per_step_lr or kw.get('learning_rate') is None:
      # the learning rate is set per step; legacy branched in Python on
      # the other hyper-parameters (and Adafactor's dtype_momentum would
      # pass for a schedule), so all of them stay static
      self.imports.add('import optax')
      kw = {'learning_rate': kw.get('learning_rate') or '0.0', **kw}
      static = [repr(p) for p in params[1:]]
      static = '(' + ', '.join(static) + (',' if len(static) == 1 else '') + ')'
      inner = ', '.join(f'{p}={v}' for p, v in kw.items())
      return (f'optax.inject_hyperparams(legacy_optax.{fn}, '
              f'static_args={static})({inner})')
    inner = [kw['learning_rate']] + [f'{p}={kw[p]}' for p in params[1:]
                                     if p in kw]
    return f"legacy_optax.{fn}({', '.join(inner)})"

  # -- type annotations --
  def visit_Annotation(self, node):
    self._in_type += 1

  def leave_Annotation(self, original_node, updated_node):
    self._in_type -= 1
    return updated_node

  def visit_Subscript(self, node):
    # Callable[[nn.Model, ...], ...] in a type alias: a type, not a value
    name = cst_util.dotted(node.value) if isinstance(
        node.value, (cst.Name, cst.Attribute)) else None
    if name and name.split('.')[-1] in TYPING_GENERICS:
      self._in_type += 1
      self._type_subscripts.add(id(node))

  def leave_Subscript(self, original_node, updated_node):
    if id(original_node) in self._type_subscripts:
      self._in_type -= 1
    return updated_node

  def leave_Attribute(self, original_node, updated_node):
    a = original_node.attr.value
    new = lifecycle_runtime.module_call(self, original_node, updated_node)
    if new is not None:
      return new
    if self._in_type and self.is_nn(original_node, 'Model'):
      # a type: what the model is now (its parameters, or a legacy Model
      # kept with a TODO where it is made) has no single class
      self.imports.add('from typing import Any')
      self.note(original_node, 'nn.Model in a type -> Any')
      return cst.Name('Any')
    # type annotations of legacy containers (flax.struct TrainStates)
    legacy_type = self.is_optim(original_node)
    if legacy_type == 'Optimizer':
      self.imports.add('from flax.training import train_state')
      return _e('train_state.TrainState')
    if legacy_type == 'DynamicScale':
      self.imports.add('from flax.training import dynamic_scale as '
                       'dynamic_scale_lib')
      return _e('dynamic_scale_lib.DynamicScale')
    if self.is_nn(original_node, 'Collection'):
      return cst.Name('dict')  # {'batch_stats': ...} variables
    k = self.kind_of(original_node.value)
    if a == 'target' and k == OPT:
      return updated_node.with_changes(attr=cst.Name('params'))
    if a == 'step' and isinstance(original_node.value, cst.Attribute) and (
        original_node.value.attr.value == 'state') and (
            self.kind_of(original_node.value.value) == OPT):
      return updated_node.value.value.with_changes() if False else \
          cst.Attribute(value=updated_node.value.value, attr=cst.Name('step'))
    if a == 'params' and k == MODEL:
      return updated_node.value
    return updated_node


class _TraversalUses(walk.ScopedVisitor):
  """The ModelParamTraversal calls whose traversal is updated or iterated
  (directly, or through a name of the same scope)."""

  def __init__(self, rw):
    self.rw = rw
    super().__init__()
    self.calls = {}  # (scope, name) -> ids of the calls assigned to it
    self.used = set()  # (scope, name) used as name.update / name.iterate
    self.direct = set()

  def _is_traversal(self, v):
    return isinstance(v, cst.Call) and isinstance(
        v.func, (cst.Name, cst.Attribute)) and (
            self.rw.is_optim(v.func) == 'ModelParamTraversal'
            or self.rw._qualify(cst_util.dotted(v.func))  # pylint: disable=protected-access
            == 'flax.optim.ModelParamTraversal')

  def visit_Assign(self, node):
    if (len(node.targets) == 1 and isinstance(node.targets[0].target,
                                              cst.Name)
        and self._is_traversal(node.value)):
      self.calls.setdefault(('.'.join(self.quals),
                             node.targets[0].target.value), set()).add(
                                 id(node.value))

  def visit_Attribute(self, node):
    if node.attr.value in ('update', 'iterate'):
      if isinstance(node.value, cst.Name):
        self.used.add(('.'.join(self.quals), node.value.value))
      elif self._is_traversal(node.value):
        self.direct.add(id(node.value))


def _traversal_objects(module, rw):
  v = _TraversalUses(rw)
  module.visit(v)
  out = set(v.direct)
  for key, ids in v.calls.items():
    if key in v.used:
      out |= ids
  return out


def _nonzero(src):
  """Whether an argument's source is given and not a literal zero."""
  return src not in (None, '0', '0.0', '0.')


def _is_state_name(expr):
  """``model_state``, ``init_state``, ``state.model_state`` ...: names the
  legacy examples give nn.Collection values."""
  name = expr.attr.value if isinstance(expr, cst.Attribute) else (
      expr.value if isinstance(expr, cst.Name) else '')
  return name == 'state' or name.endswith('_state')


def _returns_optax(rw, call):
  """Whether ``call`` calls a function of this file, or ``module.fn`` of an
  imported file of the codebase (same directory first), that returns
  ``optim.X(...)`` the pass rewrites to optax."""
  if isinstance(call.func, cst.Name):
    return call.func.value in getattr(rw.f, 'optdef_functions', ())
  if not (isinstance(call.func, cst.Attribute)
          and isinstance(call.func.value, cst.Name)):
    return False
  local = call.func.value.value
  if local not in rw.f.imports:
    return False
  stem = rw.f.imports[local].split('.')[-1]
  here = os.path.dirname(rw.f.path)
  files = [f for p, f in rw.codebase.files.items()
           if os.path.splitext(os.path.basename(p))[0] == stem]
  files.sort(key=lambda f: os.path.dirname(f.path) != here)
  return bool(files) and call.func.attr.value in getattr(
      files[0], 'optdef_functions', ())


def _specs(src):
  """``[((1, 28, 28, 1), jnp.float32)]`` -> [('(1, 28, 28, 1)', 'jnp.float32')]
  (facts.init_specs decides what is a shape and what a pair)."""
  specs = facts_lib.init_specs(src, opaque=True)
  if specs is None:
    return None
  return [(s, 'jnp.float32' if d is None else d) for s, d in specs]


def _spec_input(shape, dtype):
  """``jnp.ones`` source for one init_by_shape spec; a spec only its value
  can classify is read at run time as legacy read it (a pair when it has
  two elements and the first is iterable, else a float32 shape)."""
  if dtype != facts_lib.RUNTIME_SPEC:
    return f'jnp.ones({shape}, {dtype})'
  return (f"jnp.ones(*({shape} if len({shape}) == 2 and hasattr({shape}[0], "
          f"'__iter__') else ({shape}, jnp.float32)))")


def _names_used(module, names, after_dots):
  """Which of ``names`` the module uses outside its import statements;
  ``after_dots``: a name after a dot (``x.optim``) counts too."""
  used = set()

  class V(walk.FastVisitor):

    def visit_Import(self, node):
      return False

    def visit_ImportFrom(self, node):
      return False

    def visit_Attribute(self, node):
      if after_dots:
        return True
      node.value.visit(self)  # not the name after the dot
      return False

    def visit_Name(self, node):
      if node.value in names:
        used.add(node.value)

  module.visit(V())
  return used


def _drop_optim_import(module, optim_locals):
  """Removes ``from flax import optim`` when nothing uses ``optim`` any more."""
  if _names_used(module, optim_locals, after_dots=True):
    return module, False

  class T(walk.FastTransformer):

    def leave_ImportFrom(self, original_node, updated_node):
      if isinstance(updated_node.names, cst.ImportStar):
        return updated_node
      keep = [a for a in updated_node.names
              if (a.asname.name.value if a.asname else cst_util.dotted(
                  a.name)) not in optim_locals]
      if len(keep) == len(updated_node.names):
        return updated_node
      if not keep:
        return cst.RemoveFromParent()
      return updated_node.with_changes(names=cst_util.clean(keep))

    def leave_Import(self, original_node, updated_node):
      keep = [a for a in updated_node.names
              if not (a.asname and a.asname.name.value in optim_locals)]
      if len(keep) == len(updated_node.names):
        return updated_node
      if not keep:
        return cst.RemoveFromParent()
      return updated_node.with_changes(names=cst_util.clean(keep))

  return T().walk(module), True


def _drop_unused_optim_names(module, f):
  """Removes ``from flax.optim[.base] import OptimizerDef, OptimizerState``
  names nothing uses any more (the definitions translated to optax)."""
  names = {l for l, full in f.imports.items() if full in (
      'flax.optim.OptimizerDef', 'flax.optim.base.OptimizerDef',
      'flax.optim.OptimizerState', 'flax.optim.base.OptimizerState')}
  if not names:
    return module, set()
  unused = names - _names_used(module, names, after_dots=False)
  if not unused:
    return module, set()

  class T(walk.FastTransformer):

    def leave_ImportFrom(self, original_node, updated_node):
      if isinstance(updated_node.names, cst.ImportStar) or not (
          (cst_util.dotted(updated_node.module) or '').startswith(
              'flax.optim')):
        return updated_node
      keep = [a for a in updated_node.names
              if (a.asname.name.value if a.asname else cst_util.dotted(
                  a.name)) not in unused]
      if len(keep) == len(updated_node.names):
        return updated_node
      if not keep:
        return cst.RemoveFromParent()
      return updated_node.with_changes(names=cst_util.clean(keep))

  return T().walk(module), unused


def run(ctx, module):
  """The program pass over one file; returns the new module."""
  rw = ProgramRewriter(ctx)
  rw.module = module
  new = rw.walk(module)
  dropped = False
  if rw.f.optim_locals:
    new, dropped = _drop_optim_import(new, rw.f.optim_locals)
  new, unused = _drop_unused_optim_names(new, rw.f)
  bound = set(ctx.facts.imports) - unused
  if dropped:
    bound -= rw.f.optim_locals
  return cst_util.add_import_lines(new, rw.imports, bound)
