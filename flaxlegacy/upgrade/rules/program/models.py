"""Models of the program pass: ``nn.Model`` values.

``nn.Model(M, params)`` -> ``params`` (or ``legacy_model.Model(M, params)``
where the model must carry its module: objects.model_carried);
``model.params`` -> ``model``; a call ``model(x)`` ->
``state.apply_fn({'params': model}, x)`` where the model comes from a
TrainState in scope, else ``M().apply({'params': model}, x)`` with the one
module class the codebase builds models of (``@nn.module_method`` calls
with ``method=``; inside ``nn.stateful`` / ``nn.stochastic`` blocks with
their variables, ``mutable`` and ``rngs``); ``nn.Model(M, params)(x)`` ->
``M().apply``; ``isinstance(x, nn.Model)`` -> ``dict``.

A mixin of ``programs.ProgramRewriter``.  A case decides a plan
(plans.ApplyFn: which module applies a model; ModelApply /
ModelApplyAssign: a model called, with the keywords that are fields, the
module method, the collections, the key and the collection it writes;
ModelValue, ModelParams, ModelType; a model called where it is made is
the life cycle's ApplyModel) that the pass's emitter writes; the TODOs
and report lines stay here."""

import os
import re

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade.collectors import aliases as alias_facts
from flaxlegacy.upgrade.collectors import programs as program_facts
from flaxlegacy.upgrade.rules import objects
from flaxlegacy.upgrade.rules.program import shared
from flaxlegacy.upgrade.rules.program.shared import MODEL  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.rules.program.shared import OPT  # pylint: disable=g-importing-member



class ModelRules:
  """``nn.Model`` values, their calls and attributes."""

  def apply_fn_for(self, model_name):
    """The apply function (plans.ApplyFn) for a model variable, or None."""
    fn = self.scope.lookup('apply_of', model_name)
    if fn:
      return fn
    opt = self.scope.lookup('state_of', model_name)
    if opt:
      return plans.ApplyFn(state=opt)
    cls = objects.model_apply_class(self.codebase, self.f.path, self._qual(),
                                    cst.Name(model_name))
    if cls is not None:
      # every model it holds is of this class (flow.py)
      return plans.ApplyFn(module=cls)
    if objects.model_built_with_keywords(self.codebase, self.f.path,
                                         self._qual(), cst.Name(model_name)):
      # M.partial(k=v) bound where the model was made: M().apply here
      # would drop k (the field's default instead, silently)
      return None
    cls = self._model_class_expr()
    if cls is not None:
      # the one module class models are built of, bound in this file
      return plans.ApplyFn(module=cls)
    return None

  def _applied_class(self, fn):
    """The source of the module class ``fn`` (an ApplyFn) applies with
    its fields' defaults -- not a partial binding some of them, not a
    train state's function nor a carried model -- or None."""
    m = fn.module if not fn.carried and fn.state is None else None
    if m is None or isinstance(m, str):
      return m
    if (isinstance(m, cst.Call)
        and cst_util.dotted(m.func) == 'functools.partial'
        and m.args and not m.args[0].keyword and not m.args[0].star):
      # models.M.partial(...), rewritten by leave_Call
      return None if m.args[1:] else self.ctx.code_of(m.args[0].value)
    if (isinstance(m, cst.Call) and isinstance(m.func, cst.Attribute)
        and m.func.attr.value == 'partial'):
      return None if m.args else self.ctx.code_of(m.func.value)
    return self.ctx.code_of(m)

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

  def _module_method(self, name):
    """True if ``name`` is an ``@nn.module_method`` of the model class."""
    infos = ([self.codebase.modules.get(self.model_class)] if self.model_class
             else list(self.codebase.modules.values()))
    return any(i is not None and getattr(i.methods.get(name), 'module_method',
                                         False) for i in infos)

  def _model_call(self, call, updated=None):
    """(plans.ModelApply, the innermost ``nn.stateful`` entry or None) of
    a model call (a Call node), or None."""
    why = self.codebase.positional_field_calls.get((self.f.path, id(call)))
    if why:
      # a field passed positionally (collectors/call_sites.py): no apply
      # of the upgraded class takes it there
      if id(call) not in self._unknown_calls:
        self._unknown_calls.add(id(call))
        self.todo(call, f'model call: {why}: pass them to the module\'s '
                  'constructor by hand')
      return None
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
      apply = plans.ApplyFn(carried=True)
    elif isinstance(f, cst.Name) and self.kind_of(f) == MODEL:
      model = f.value
      apply = self.apply_fn_for(model)
      if apply is not None and _moduleless(apply):
        apply = None  # nn.Model(None, params): nothing to apply (a TODO)
      cls = None if apply is None else self._applied_class(apply)
      if cls is not None and cls == self._model_class_expr():
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
      # opt.target(x): the train state's function and parameters
      apply = plans.ApplyFn(state=self.ctx.code_of(f.value))
      model = None
    elif (isinstance(f, cst.Attribute) and method is None
          and objects.holds_models(self.codebase, self.f.path, self._qual(),
                                   f)):
      # self.model(x): an attribute every value of which is an nn.Model
      # the upgrade rewrites, all of one class (flow.py)
      model = self.ctx.code_of(f)
      cls = objects.model_apply_class(self.codebase, self.f.path,
                                      self._qual(), f)
      apply = None if cls is None else plans.ApplyFn(module=cls)
    else:
      return None
    if apply is None:
      if id(call) in self._unknown_calls:
        return None
      self._unknown_calls.add(id(call))
      self.todo(call, 'model call: the module of this model is not known '
                'here; apply it with module.apply')
      return None
    st = self._stateful[-1] if self._stateful else None
    if updated is None or not isinstance(updated, cst.Call) or len(
        updated.args) != len(call.args):
      updated = call
    fields = set()
    info = None
    cls = self._applied_class(apply)
    if cls is not None and re.fullmatch(r'[\w.]+', cls):
      # the class this model was built of (nn.Model(pkg.M, params) here)
      info = alias_facts.root_info(self.codebase, None, cls.split('.')[-1])
    if info is None and cls is not None and re.fullmatch(r'\(\w+\)', cls):
      # ``(model_cls)``: a model builder's module, the name its caller
      # passed (lifecycle._builder_call): the class every value of that
      # name is (flow.py)
      info = self._flow_info(cst.Name(cls[1:-1]))
    if info is None and not carried:
      info = self.codebase.modules.get(self.model_class or '')
    if info is not None:
      fields = set(info.fields) | ({info.var_kw} if info.var_kw else set())
    field_args = [a for a in updated.args if a.keyword is not None
                  and a.keyword.value in fields]
    if cls is not None and cls == self._model_class_expr():
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
    rng = self._stochastic[-1] if self._stochastic else None
    # (a mutable block with no ``as`` target writes too: linen's layers
    # need their collection mutable; what they write is dropped, as legacy
    # dropped the block's new collection)
    mutable = st is not None and st[2]
    return plans.ModelApply(
        fn=apply, params=model,
        inputs=self._decoded(a for a in updated.args if a not in field_args),
        fields=self._decoded(field_args), method=method,
        collections=st[0] if st is not None else None, rng=rng,
        mutable=st[4] if mutable else None), st

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
    rewritten = isinstance(new_inner, cst.Call) and len(new_inner.args) == 2
    self.note(original, 'nn.Model(M, params)(...) -> M().apply')
    return self.emit.apply_model(plans.ApplyModel(
        self._decoded_module(new_inner.args[0].value if rewritten
                             else module),
        new_inner.args[1].value if rewritten else inner.args[1].value,
        self._decoded(updated.args)))

  def _call_model(self, original_node, updated_node):
    """A model call ``model(x)`` in expression position (not an
    assignment: rules/program/stateful.py threads the state there)."""
    # model(x) in expression position (not an assignment handled above)
    r = self._model_call(original_node, updated_node)
    if r is not None:
      plan, st = r
      mutable = plan.mutable is not None
      if mutable and id(original_node) in self._assign_values:
        return updated_node  # leave_SimpleStatementLine threads the state
      if mutable and st[1] is None:
        # ``with nn.stateful(s):`` with no target: the outputs alone
        st[3] = True
        self.note(original_node, 'model call in nn.stateful (no target) -> '
                  'apply, mutable, outputs')
        self._rewritten_calls.add(id(original_node))
        return self.emit.model_outputs(plan)
      if mutable:
        self.todo(original_node, 'model call inside nn.stateful outside a '
                  'plain assignment: the new state is not threaded back')
        return updated_node
      if st is not None:
        st[3] = True
      self.note(original_node, 'model call -> apply')
      self._rewritten_calls.add(id(original_node))
      return self.emit.model_apply(plan)
    return None

  def _call_isinstance(self, original_node, updated_node):
    """``isinstance(x, nn.Model)``."""
    f = original_node.func
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
        args[1] = args[1].with_changes(value=self.emit.model_type(
            plans.ModelType(carried=bool(is_carried))))
        return updated_node.with_changes(args=args)
    return None

  def _call_inline_model(self, original_node, updated_node):
    """``nn.Model(M, params)(x)``: a model called where it is made."""
    # nn.Model(M, params)(x): called where it is made
    inner = original_node.func
    if (isinstance(inner, cst.Call) and self.is_nn(inner.func, 'Model')
        and len(inner.args) == 2 and not any(a.star for a in inner.args)):
      return self._inline_model_call(original_node, updated_node)
    return None

  def _call_nn_model(self, original_node, updated_node):
    """``nn.Model(M, params)``."""
    f = original_node.func
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
        self.note(original_node, 'nn.Model(M, params) -> legacy_model.Model '
                  '(it carries its module)')
        return self.emit.model_value(plans.ModelValue(updated_node,
                                                      carried=True))
      if shared.no_module(original_node.args[0]):
        # nn.Model(None, params): a bag of parameters for an optimizer
        # (init2winit's meta_init); no module to lose, and legacy could not
        # call it either (its calls get the TODO of a model whose module is
        # not known, _model_call)
        self.note(original_node, 'nn.Model(None, params) -> params')
        return self.emit.model_value(plans.ModelValue(updated_node))
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
      if not reach and self._builder_module(original_node.args[0].value):
        # a model builder's model, its module the builder's parameter:
        # each call of the builder names the module its models apply with
        # (lifecycle._builder_call), and the model goes nowhere else
        self.note(original_node, 'nn.Model(M, params) of a model builder '
                  '(M its parameter) -> params')
        return self.emit.model_value(plans.ModelValue(updated_node))
      if not self._known_module(original_node.args[0].value):
        # params alone would lose M: the model's calls elsewhere (a
        # parameter, an attribute ...) would call a dict
        self.todo(original_node, 'nn.Model(M, params): M is not known here '
                  'to be a legacy module class, so the calls of this model '
                  'cannot become M().apply(params, ...); port by hand')
        return updated_node
      self.note(original_node, 'nn.Model(M, params) -> params')
      return self.emit.model_value(plans.ModelValue(updated_node))
    return None

  def _builder_module(self, expr):
    """Whether ``expr`` (the M of ``nn.Model(M, params)``) is the module
    parameter of the model builder being rewritten (``def _init(model_cls,
    ...): ... return nn.Model(model_cls, params), state``:
    collectors/programs.py) and every value the codebase passes there is a
    legacy module class or layer (flow.py; nothing unknown)."""
    if not (isinstance(expr, cst.Name) and len(self._quals) == 1):
      return False
    builder = self.f.model_builders.get(self._quals[0])
    if builder is None or builder[1] != expr.value or (
        expr.value not in builder[0]):
      return False
    flow = getattr(self.codebase, 'flow', None)
    if flow is None:
      return False
    vals = flow.values_of(self.f.path, self._qual(), expr)
    return all(v[0] in ('class', 'layer') for v in vals)

  def _attr_params(self, original_node, updated_node, k):
    """``model.params`` -> ``model`` (a model is its parameters now)."""
    if k == MODEL:
      return self.emit.model_params(plans.ModelParams(updated_node))
    return updated_node


def _moduleless(fn):
  """Whether the ApplyFn ``fn`` is a model's with no module
  (``nn.Model(None, params)``)."""
  return fn.module is None and fn.state is None and not fn.carried
