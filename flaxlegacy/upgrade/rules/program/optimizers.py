"""Optimizers of the program pass: legacy ``flax.optim`` definitions
and the optimizers they create.

``optim.X(...).create(target)`` ->
``train_state.TrainState.create(apply_fn=..., params=target, tx=...)``
with plain optax where its numbers equal legacy (table ``OPTAX``), else the
legacy rule from ``flaxlegacy.migrate.legacy_optax`` (plain optax, same
constructor arguments; table ``LEGACY_OPTAX``); ``optax.inject_hyperparams``
where the codebase passes ``learning_rate`` per step;
``optim.MultiOptimizer((optim.ModelParamTraversal(f), opt), ...)`` ->
``optax.multi_transform`` labelled by ``legacy_optax.traversal_labels(f,
...)`` (a traversal the code updates or iterates itself ->
``flax.traverse_util.ModelParamTraversal``); ``optim.DynamicScale`` ->
``flax.training.dynamic_scale.DynamicScale``.  The tables are
collectors/programs.py's (facts need them too).  User-written
``OptimizerDef`` subclasses: user_optimizers.py; what a program does with
an optimizer once made: training_steps.py.

A mixin of ``programs.ProgramRewriter``.  A case decides a plan
(plans.Transformation, MultiTransform, MakeTrainState, TraversalObject,
DynamicScale) that the pass's emitter (``self.emit``) writes; the optax
spellings (the ``OPTAX`` table's functions, ``inject_hyperparams``,
``TrainState``) are the emitter's, the binding of the legacy arguments,
the TODOs and the report lines stay here."""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade import walk
from flaxlegacy.upgrade.collectors.programs import LEGACY_OPTAX  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.collectors.programs import MOMENTUM_WITH_DECAY  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.collectors.programs import OPTAX  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.collectors.programs import TX_RULES  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.rules import objects
from flaxlegacy.upgrade.rules.program import shared
from flaxlegacy.upgrade.rules.program.shared import MODEL  # pylint: disable=g-importing-member


class OptimizerRules:
  """Legacy optimizer definitions and ``create``."""

  def _traversal_objects(self):
    """ids of the ``ModelParamTraversal(f)`` calls of this file whose
    traversal the code uses itself (``.update`` / ``.iterate``), computed
    once."""
    if self._traversals is None:
      self._traversals = _traversal_objects(self.module, self)
    return self._traversals

  def _create(self, node, opt_call, name, tx=None, updated=None):
    """The train state ``definition.create(target[, focus])`` makes
    (plans.MakeTrainState), or None (a TODO where it is not certain).
    ``tx``: the source of a transformation made elsewhere, a user
    definition's (plans.UserTransformation), or None for the definition
    ``opt_call`` (``optim.<name>(...)``); ``updated``: the create call as
    rewritten so far (its focus argument's filter)."""
    if not node.args:
      return None
    focus = self._focus(node, updated)
    if focus is False:
      return None
    why = objects.optimizer_kept(self.codebase,
                                 ('o', self.f.path, id(node)),
                                 self.model_class)
    if why:
      self.todo(node, f'optimizer: {why}; the upgrade keeps it legacy, and '
                'every place it reaches')
      return None
    target = node.args[0].value
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
    if focus is not None and is_carried:
      # the labels' paths would be the Model's (its pytree), not those of
      # its parameters legacy's traversal walked
      self.todo(node, f'optim.{name}(...).create(model, focus=...) of a '
                'model that carries its module: optax.multi_transform would '
                'label the Model, not its parameters; port by hand')
      return None
    if not is_carried and isinstance(target, cst.Name):
      apply = self.apply_fn_for(target.value)
    elif not is_carried and isinstance(target, cst.Call) and self.is_nn(
        target.func, 'Model') and target.args and shared.no_module(
            target.args[0]):
      apply = plans.ApplyFn()  # nn.Model(None, params) in place: no module
    if not is_carried and apply is None:
      self._bare_creates.add(id(node))
      self.todo(node, 'TrainState.apply_fn: the module of this model is not '
                'known here; apply it with module.apply (and if the target '
                'is a bare array, not a dict of parameters, '
                'TrainState.apply_gradients refuses it: wrap it in a dict)')
    self.note(node, f'optim.{name}(...).create -> TrainState')
    if focus is not None:
      self.note(node, 'create(target, focus=traversal) -> '
                'optax.multi_transform (the rest frozen)')
    if isinstance(updated, cst.Call) and len(updated.args) == len(
        node.args):
      # the target as rewritten (nn.Model(None, params) written in place)
      target = updated.args[0].value
    return self.emit.make_train_state(plans.MakeTrainState(
        params=target, tx=tx, apply_fn=apply, carried=bool(is_carried),
        focus=focus))

  def _focus(self, node, updated):
    """The filter of ``create(target, focus)``'s traversal (a node, as
    rewritten so far); None without a focus; False where the call's other
    arguments or its focus are not known here (a TODO: never dropped).
    Legacy wrapped the definition in ``MultiOptimizer((focus, def))``."""
    args = list(node.args)
    u_args = (list(updated.args) if isinstance(updated, cst.Call)
              and len(updated.args) == len(args) else args)
    rest = list(zip(args[1:], u_args[1:]))
    if not rest:
      return None
    a, u = rest[0]
    if len(rest) != 1 or a.star or (a.keyword is not None
                                    and a.keyword.value != 'focus'):
      self.todo(node, 'create(target, ...): arguments past the target and '
                'focus are not known to the upgrade; port by hand')
      return False
    value = a.value
    if isinstance(value, cst.Name) and value.value == 'None':
      return None  # legacy: no focus
    filt = self._traversal_filter(value, u.value)
    if filt is None:
      self.todo(node, 'create(target, focus=...): the focus is not known '
                'here to be an optim.ModelParamTraversal(f) the upgrade '
                'turns into its filter, so it cannot label an '
                'optax.multi_transform; port by hand (dropping it would '
                'update every parameter)')
      return False
    if self.per_step_lr:
      self.todo(node, 'create(target, focus=...) with hyper-parameters set '
                'per step: optax.multi_transform has no hyperparams to set')
      return False
    return filt

  def _traversal_filter(self, original, updated):
    """The filter ``f`` (``updated``, as rewritten) of a legacy
    ``optim.ModelParamTraversal(f)`` written here or bound to a name in
    scope, which the pass turned into ``f`` itself; else None (a traversal
    kept as an object, anything else)."""
    call = original
    if isinstance(original, cst.Name):
      call = self.scope.lookup('traversals', original.value)
    if not (isinstance(call, cst.Call) and isinstance(
        call.func, (cst.Name, cst.Attribute)) and self.is_optim(
            call.func) == 'ModelParamTraversal'):
      return None
    args = call.args
    if id(call) in self._traversal_objects() or len(args) != 1 or (
        args[0].keyword is not None or args[0].star):
      return None  # kept a traversal (or left as written, a TODO)
    return updated

  def _tx(self, node, opt_call, name):
    """The transformation of ``optim.<name>(...)`` (the call node): a
    plans.Transformation, the MultiTransform of a MultiOptimizer, or None
    (a TODO)."""
    if name in LEGACY_OPTAX:
      return self._legacy_tx(node, opt_call, name, LEGACY_OPTAX[name])
    if name == 'MultiOptimizer':
      return self._multi_src.get(id(opt_call))
    if name not in OPTAX:
      self.todo(node, f'optim.{name}: no optax transformation with the same '
                'numbers is known to the upgrade; port by hand (a legacy '
                'definition gives one: optimizer_def.as_optax())')
      return None
    _, table = OPTAX[name]
    kw = self._bind_args(node, opt_call, name, tuple(table),
                         'no rewrite for this argument')
    if kw is None:
      return None
    decay = shared.nonzero(kw.get('weight_decay'))
    per_step = bool(self.per_step_lr or kw.get('learning_rate') is None)
    if per_step and name == 'Momentum' and decay:
      # a chain has no hyperparams to set: one legacy_optax state instead
      return self._legacy_tx(node, opt_call, name, MOMENTUM_WITH_DECAY)
    return plans.Transformation(name, tuple(kw.items()), per_step=per_step,
                                decay=decay)

  def _traversal(self, original, updated):
    """``optim.ModelParamTraversal(f)`` -> ``f``: the filter itself, which
    ``legacy_optax.traversal_labels`` reads (with the legacy paths); a
    traversal the code updates or iterates itself -> today's
    ``flax.traverse_util.ModelParamTraversal(f)`` (same paths, on the
    parameter dict a model became)."""
    args = updated.args
    if id(original) in self._traversal_objects():
      self.note(original, 'optim.ModelParamTraversal -> '
                'flax.traverse_util.ModelParamTraversal')
      return self.emit.traversal_object(plans.TraversalObject(updated))
    if len(args) != 1 or args[0].keyword is not None or args[0].star:
      self.todo(original, 'optim.ModelParamTraversal call form')
      return updated
    self.note(original, 'optim.ModelParamTraversal(f) -> f')
    return args[0].value

  def _multi(self, original, updated):
    """``optim.MultiOptimizer((traversal, opt), ...)``: the
    plans.MultiTransform, or None (a TODO)."""
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
      filters.append(u_trav.value)
      txs.append(u_opt.value)
    if not txs:
      self.todo(original, 'optim.MultiOptimizer without pairs')
      return None
    return plans.MultiTransform(tuple(filters), tuple(txs))

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
    """The Transformation of ``optim.<name>(...)`` by the legacy rule
    ``rule`` (``legacy_optax``), or None."""
    _, params = rule
    kw = self._bind_args(node, opt_call, name, params,
                         'not a parameter of the legacy constructor')
    if kw is None:
      return None
    return plans.Transformation(
        name, tuple(kw.items()),
        per_step=bool(self.per_step_lr or kw.get('learning_rate') is None),
        legacy=(rule[0], tuple(params)))

  def _call_optim_create(self, original_node, updated_node):
    """``optim.X(...).create(target)``."""
    f = original_node.func
    # optim.X(...).create(target)
    if isinstance(f, cst.Attribute) and f.attr.value == 'create' and (
        isinstance(f.value, cst.Call)):
      name = self.is_optim(f.value.func)
      if name is not None:
        return self._create(original_node, f.value, name,
                            updated=updated_node) or updated_node
    return None

  def _call_definition_create(self, original_node, updated_node):
    """``optimizer_def.create(target)`` of a definition made elsewhere:
    a name bound to ``optim.X(...)``, a value flow.py knows, a function
    of the codebase returning one."""
    f = original_node.func
    # optimizer_def.create(target), optimizer_def = optim.X(...)
    if isinstance(f, cst.Attribute) and f.attr.value == 'create' and (
        isinstance(f.value, cst.Name)) and self.scope.lookup(
            'optdefs', f.value.value):
      name = self.scope.lookup('optdefs', f.value.value)
      return self._create(original_node, None, name, tx=f.value.value,
                          updated=updated_node) or updated_node
    # optimizer_def.create(target), every value of optimizer_def a legacy
    # definition, which this pass makes an optax transformation (flow.py)
    # (``get_optimizer(config).create(target)`` too: what the function
    # returns, wherever it is bound before)
    if isinstance(f, cst.Attribute) and f.attr.value == 'create' and (
        isinstance(f.value, (cst.Name, cst.Attribute, cst.Call))) and len(
            original_node.args) == 1:
      names = objects.optdef_names(self.codebase, self.f.path, self._qual(),
                                   f.value)
      if names and names <= TX_RULES:
        return self._create(original_node, None, 'Optimizer',
                            tx=self.ctx.code_of(f.value),
                            updated=updated_node) or updated_node
    # make_optimizer_def(...).create(model): a definition from a function
    if isinstance(f, cst.Attribute) and f.attr.value == 'create' and len(
        original_node.args) == 1 and (self.kind_of(
            original_node.args[0].value) == MODEL or objects.carried(
                self.codebase, self.f.path, self._qual(),
                original_node.args[0].value)[0]) and isinstance(
                    f.value, cst.Call) and shared.returns_optax(self, f.value):
      return self._create(original_node, None, 'Optimizer', tx=self.ctx.code_of(
          updated_node.func.value), updated=updated_node) or updated_node
    return None

  def _call_optim_constructor(self, original_node, updated_node):
    """``optim.X(...)`` alone: the optax transformation."""
    f = original_node.func
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
        return self.emit.multi_transform(tx)
      return updated_node
    if name in TX_RULES:
      tx = self._tx(original_node, original_node, name)
      if tx is not None:
        new = self.emit.transformation(tx)
        # the report names the function the target's text calls
        self.note(original_node, f'optim.{name}(...) -> '
                  f'{cst.Module([]).code_for_node(new).split("(")[0]}')
        return new
    return None

  def _call_dynamic_scale(self, original_node, updated_node):
    """``optim.DynamicScale(...)`` -> flax.training.dynamic_scale."""
    f = original_node.func
    if isinstance(f, cst.Name) or isinstance(f, cst.Attribute):
      if self.is_optim(f) == 'DynamicScale':
        return self.emit.dynamic_scale(plans.DynamicScale(updated_node))
    return None


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
