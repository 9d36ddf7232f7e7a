"""The model life cycle of the program pass: ``M.init_by_shape`` /
``create_by_shape`` / ``init`` / ``create`` -> ``M(...).init(rng, ...)``
(``['params']``, or ``init_with_output`` where the output is used),
``M.partial`` at program level -> ``functools.partial``, ``M.call(params,
...)`` -> ``M().apply``, and models made by a codebase's builder functions
(``model = create_model(...)``).  A mixin of ``programs.ProgramRewriter``;
its rules are entries of the pass's ordered tables (``programs.CALL_RULES``,
``programs.ASSIGN_RULES``)."""

import builtins
import keyword
import re

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade.collectors import aliases as alias_facts
from flaxlegacy.upgrade.collectors import programs as program_facts
from flaxlegacy.upgrade.collectors.programs import LIFECYCLE  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.rules import attention_cache
from flaxlegacy.upgrade.rules import lifecycle_runtime
from flaxlegacy.upgrade.rules import objects
from flaxlegacy.upgrade.rules.program import shared
from flaxlegacy.upgrade.rules.program.shared import MODEL  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.rules.program.shared import NEXT  # pylint: disable=g-importing-member

_e = shared.expr_node


class LifecycleRules:
  """Module life cycle: init / create, partial, call."""

  def _model_apply_fn(self, model_call):
    """The apply function (plans.ApplyFn) of ``nn.Model(M, params)``: no
    module for ``nn.Model(None, params)`` (a model with no module:
    nothing to apply, a bag of parameters for an optimizer), else M's."""
    module = model_call.args[0].value if model_call.args else None
    if module is None or (isinstance(module, cst.Name)
                          and module.value == 'None'):
      return plans.ApplyFn()
    return plans.ApplyFn(module=self._decoded_module(module))

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
    self.scope.apply_of[target.value] = plans.ApplyFn(
        module=self._decoded_module(_e(expr)))

  def _init_plan(self, call):
    """The InitModel of a legacy lifecycle call, or None (with a TODO
    where the call cannot be read with certainty)."""
    attr = call.func.attr.value
    args = list(call.args)
    if not args:
      return None
    if attr in ('init_by_shape', 'create_by_shape'):
      if len(args) < 2:
        return None
      specs = shared.specs(self.ctx.code_of(args[1].value))
      if specs is None:
        self.todo(call, f'{attr} input specs: not a literal list of shapes '
                  'and (shape, dtype) pairs, or a spec that could be either')
        return None
      # legacy: apply(*shaped inputs, *args[2:], **keywords)
      positional = [a for a in args[2:] if a.keyword is None]
      rest = [a for a in args[2:] if a.keyword is not None]
    else:
      if any(a.star == '**' for a in args):
        # a splatted dict holds fields and __call__ arguments: which, only
        # its keys at run time can tell
        self.todo(call, f'{attr} with **kwargs: its keys may be fields '
                  '(constructor) or __call__ arguments; port by hand')
        return None
      specs = None
      positional = [a for a in args[1:] if a.keyword is None]
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
    # a positional argument goes to the apply parameter of its position:
    # a field there is a constructor keyword (``M.init(rng, x, 2.0)`` of
    # ``apply(self, x, scale=1.0)``), the rest stay inputs, in order
    field_pos, inputs = [], []
    first = 0 if specs is None else len(specs)
    for j, a in enumerate(positional):
      p = (info.params[first + j] if info is not None and not any(
          b.star for b in positional[:j + 1]) and first + j < len(
              info.params) else None)
      if p is not None and p in info.fields:
        field_pos.append((p, a.value))
      else:
        inputs.append(a)
    kw = [a for a in rest if a.keyword is not None and a not in field_kw]
    return plans.InitModel(
        module=self._decoded_module(call.func.value), rng=args[0].value,
        shapes=None if specs is None else tuple(specs),
        inputs=self._decoded(inputs), positional_fields=tuple(field_pos),
        fields=self._decoded(field_kw), kwargs=self._decoded(kw))

  def _lifecycle_statement(self, orig, stmt, updated_node):
    """``M.init_by_shape(rng, specs)`` as a statement of its own (NEXT
    where ``orig`` is not one)."""
    if (isinstance(orig, cst.Expr) and isinstance(orig.value, cst.Call)
        and isinstance(orig.value.func, cst.Attribute)
        and orig.value.func.attr.value in LIFECYCLE
        and self._is_module_expr(orig.value.func.value)):
      # M.init_by_shape(rng, specs, ...) for its effect alone (a test
      # that it raises): linen's init, the result dropped as before
      init = self._init_plan(orig.value)
      if init is not None:
        self.note(orig, f'{orig.value.func.attr.value} -> linen init')
        return updated_node.with_changes(body=[stmt.with_changes(
            value=self.emit.init_model(init))])
      return updated_node
    return NEXT

  def _assign_runtime(self, orig, stmt, line):
    """A life cycle call of a module known only at run time
    (rules/lifecycle_runtime.py)."""
    t = stmt.targets[0].target
    v = stmt.value
    ov = orig.value
    runtime = lifecycle_runtime.lifecycle_assign(self, ov, v, t)
    if runtime is not None:
      return [self.emit.runtime_lifecycle(runtime)]
    return NEXT

  def _assign_unknown_pair(self, orig, stmt, line):
    """``_, params = X.init(rng, ...)`` of an X not known to hold one
    legacy module class."""
    t = stmt.targets[0].target
    v = stmt.value
    ov = orig.value
    attr = ov.func.attr.value
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
        args = stmt.value.args if (
            isinstance(stmt.value, cst.Call) and len(stmt.value.args) == len(
                ov.args)) else ov.args
        self.note(line, 'X.init(rng, ...) of module classes known at run '
                  'time -> legacy_model.init_module')
        return [self.emit.init_any_module(plans.InitAnyModule(
            t, ov.func.value, self._decoded(args)))]
      # otherwise left, never silently
      self.todo(ov, f'{self.ctx.code_of(ov.func)}(...) with a pair target: '
                'legacy module life cycle on a value not known here to hold '
                'one legacy module class; port by hand to '
                "M(...).init(rng, ...)['params']")
      return None
    return NEXT

  def _assign_lifecycle(self, orig, stmt, line):
    """``_, model = M.create_by_shape(rng, specs)`` and the other life
    cycle calls of a known module, with a pair target."""
    t = stmt.targets[0].target
    v = stmt.value
    ov = orig.value
    attr = ov.func.attr.value
    # _, model = M.create_by_shape(rng, specs)  /  M.init_by_shape
    if attr in LIFECYCLE and isinstance(t, (cst.Tuple, cst.List)) and len(
        t.elements) == 2 and (self._is_module_expr(ov.func.value) or (
                isinstance(ov.func.value, cst.Name)
                and self.scope.lookup('modvars_', ov.func.value.value))):
      first = t.elements[0].value
      init = self._init_plan(v if isinstance(v, cst.Call) and isinstance(
          v.func, cst.Attribute) else ov)
      if init is None:
        return None
      collect = self._stateful[-1] if self._stateful else None
      carried = None
      if attr.startswith('create') and objects.model_carried(
          self.codebase, ('mc', self.f.path, id(ov))):
        # the model goes where its parameters alone cannot follow it: it
        # carries its module, whatever M holds at run time (the keywords
        # given here are the init's, as legacy's model kept only M)
        carried = (v.func.value if isinstance(v, cst.Call) and isinstance(
            v.func, cst.Attribute) else ov.func.value)
      collections_to = only = None
      if collect is not None and collect[0] is None and collect[1]:
        # ``with nn.stateful() as t:``: t gets the other collections
        collections_to = collect[1]
        if collect[4] == attention_cache.COLLECTION:
          only = attention_cache.COLLECTION
        collect[3] = True
      out = self.emit.model_init(plans.ModelInit(
          init=init, params=t.elements[1].value,
          output=None if (isinstance(first, cst.Name)
                          and first.value == '_') else first,
          carried_module=carried, collections_to=collections_to, only=only))
      self.note(line, f'{attr} -> linen init' + (
          '' if carried is None else ' (the model carries its module: '
          'legacy_model.Model)'))
      return out
    return NEXT

  def _call_partial(self, original_node, updated_node):
    """``models.M.partial(...)`` -> ``functools.partial``."""
    f = original_node.func
    # models.M.partial(...) at program level (rules/modules.py rewrites
    # the bare-name form M.partial)
    if (isinstance(f, cst.Attribute) and f.attr.value == 'partial'
        and isinstance(f.value, cst.Attribute)
        and self._is_module_expr(f.value)):
      self.note(original_node, 'M.partial -> functools.partial')
      return self.emit.module_partial(plans.ModulePartial(updated_node))
    return None

  def _call_module_call(self, original_node, updated_node):
    """``M.call(params, ...)`` -> ``M().apply``."""
    f = original_node.func
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
      self.note(original_node, 'M.call(params, ...) -> M().apply')
      return self.emit.apply_model(plans.ApplyModel(
          self._decoded_module(f.value), original_node.args[0].value,
          self._decoded(original_node.args[1:])))
    return None

  def _attr_module_call(self, original_node, updated_node, k):
    """``M.call`` taken as a function, not called here (``fn = M.call``,
    ``jax.pmap(M.call)``) -> ``legacy_model.module_call(M)``: the same
    function of the parameters and inputs; the keywords it is called with
    are split between M's fields and ``__call__`` at run time (``fn(params,
    x, train=True)`` where ``train`` is a field in linen)."""
    del k
    if (id(original_node) in self._called_funcs
        or not self._known_module(original_node.value)):
      return updated_node
    info = self._flow_info(original_node.value) or alias_facts.root_info(
        self.codebase, None, program_facts.class_name(original_node.value))
    code = self.ctx.code_of(original_node.value)
    if (info is None or info.kind != 'class' or info.var_pos
        or list(info.params[:len(info.call)]) != list(info.call)
        or self._stateful or self._stochastic):
      # the positional arguments it will get may be fields in linen (the
      # module's inputs are not its first parameters), or the call runs
      # under a legacy collection / rng scope rewritten statically here
      self.todo(original_node, f'{code}.call taken as a function: the '
                'arguments it will be called with are not known here to be '
                'the module\'s inputs; use M(fields).apply({"params": '
                'params}, inputs)')
      return updated_node
    self.note(original_node, 'M.call as a function -> '
              'legacy_model.module_call(M)')
    return self.emit.module_function(plans.ModuleFunction(updated_node.value))
