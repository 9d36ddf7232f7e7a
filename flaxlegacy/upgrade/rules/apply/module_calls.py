"""Calls of what the callee resolves to (rules/resolver.py) in a module
body: a legacy layer or module class -> construct (hyper-parameters,
``name=`` with the legacy auto-name) + call (inputs); ``**d`` into a legacy
module (rules/splat.py); a shared module's call; a class known only at run
time (rules/runtime_modules.py); ``nn.dropout`` (stochastic.py) and legacy
attention (rules/attention.py) go to their rules; a callee not known,
called like a legacy module, gets a TODO.

A construct + call is a plan (plans.SubmoduleCall) the rewriter's emitter
writes: the case binds the arguments, leaves TODOs, reports, and decides
the auto-name; the target's keyword spellings are the emitter's."""

import dataclasses

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import layer_table
from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade.rules import _shared
from flaxlegacy.upgrade.rules import attention as attention_rule
from flaxlegacy.upgrade.rules import called_layers
from flaxlegacy.upgrade.rules import constructors
from flaxlegacy.upgrade.rules import name_plan
from flaxlegacy.upgrade.rules import runtime_modules
from flaxlegacy.upgrade.rules import splat

MAYBE_PARTIAL_NAMED = (
    'name= a parameter whose default is None, on a .partial that names its '
    'calls: legacy used the partial\'s name where it is None; write the '
    'choice by hand')
MAYBE_UNKNOWN = ('name= a parameter whose default is None: legacy '
                 'auto-named the submodule where it is None, and the '
                 'upgrade cannot tell that name here')


def _module_call_form(call):
  """A call that passes ``name=`` or two or more positional arguments."""
  positional = [a for a in call.args if a.keyword is None and not a.star]
  return len(positional) >= 2 or any(
      a.keyword is not None and a.keyword.value == 'name' for a in call.args)


class ModuleCallRules:
  """Calls of resolved legacy layers / modules."""

  def _call_callee(self, original_node, updated_node):
    """The call, by what its callee resolves to (the last case: always
    answers)."""
    f = original_node.func
    ref = self.resolver(f)
    if ref is None:
      if isinstance(f, cst.Name) and f.value in self.resolver.why_not:
        self.todo(original_node, self.resolver.why_not[f.value])
      elif (isinstance(f, cst.Name) and f.value in self.fields
            and self.info.defaults.get(f.value) in (None, 'None')
            and _module_call_form(original_node)):
        # a hyper-parameter called with hyper-parameters after the input
        # or a name=: a legacy module (X.partial) by the look of it, but
        # nothing in the codebase says what it holds (sam's conv=)
        self.todo(original_node, f'{f.value!r} is called like a legacy '
                  'module (arguments after the input, or a name=), but what '
                  'it holds is not known here: if it is a legacy module, '
                  'construct it with the hyper-parameters and call it on the '
                  'input')
      return updated_node
    if ref.kind == 'dropout':
      return self._dropout(original_node, updated_node)
    if ref.kind == 'attention':
      return attention_rule.rewrite(self, original_node, updated_node,
                                    ref.target, guard=ref.extra)
    if ref.kind == 'instance':
      return updated_node  # calls a module instance (rules/partial_locals)
    return self._module_call(original_node, updated_node, ref)

  def _module_call(self, original, updated, ref):
    if ref.kind == 'class' and ref.extra == called_layers.EXTRA:
      return called_layers.call(self, original, updated, ref)
    if ref.kind == 'class' and ref.extra == 'runtime':
      return runtime_modules.call(
          self, original, updated, ref, lambda: self._auto_name_plan(
              original, None, cst.Module([]).code_for_node(updated.func)))
    why = runtime_modules.unknown_positions(self, original, ref)
    if why:
      known = runtime_modules.known_positions(self, original, ref)
      if not known:
        self.todo(original, why)
        return updated
      # the classes the codebase gives it name the positions alike: the
      # default's signature, checked against them when the call runs
      updated = updated.with_changes(func=self.emit.known_module(
          plans.KnownModule(module=updated.func, known=tuple(known),
                            where=f'{self.info.name}.'
                            f'{self.ctx.code_of(original.func)}')))
    args = list(updated.args)
    if any(a.star for a in args if a.star == '*'):
      self.todo(original, 'submodule call with *args')
      return updated
    if ref.kind == 'shared':
      # a call of a shared module variable: inputs only
      if _shared.shared_call_problem(ref.target, original):
        self.todo(original, _shared.SHARED_CALL_TODO)
      return updated
    target = constructors.partial_root(ref)
    var_pos = None
    if target.kind == 'layer':
      sig = ('inputs',) + target.target.params
      pos_sig = sig
    else:
      sig = tuple(target.target.params)
      pos_sig = sig
      var_pos = target.target.var_pos
      if var_pos:  # positional arguments past the named ones: *args
        pos_sig = tuple(p for p in sig if p not in target.target.kwonly)
    bound = []  # (legacy param name or None, Arg)
    var_kw = {}
    splat_values = {}  # id(updated ** Arg) -> the legacy source's value
    expanded = []
    for a, o in zip(args, original.args):
      keys = splat.literal_keywords(a.value) if a.star == '**' else None
      if keys is not None:  # **{'k': v}: keywords of the call
        expanded += [(cst_util.arg(v, k2), None) for k2, v in keys]
      else:
        expanded.append((a, o))
    args = [a for a, _ in expanded]
    for i, (a, o) in enumerate(expanded):
      k = cst_util.kw(a)
      if a.star == '**' and o is not None:
        splat_values[id(a)] = o.value
      if a.star == '**':
        if target.kind == 'class' or not target.target.add_kwargs:
          bound.append(('**', a))  # layer: keys renamed at run time below
          continue
        self.todo(original, f'legacy {target.target.legacy} call with '
                  '**kwargs (the argument linen needs for legacy numbers '
                  'may be among them)')
        return updated
      if k is None:
        if i >= len(pos_sig) and var_pos:
          bound.append(('*', a))
          continue
        if i >= len(pos_sig):
          self.todo(original, 'more positional arguments than the legacy '
                    'apply takes')
          return updated
        bound.append((pos_sig[i], a))
      elif k == 'name':
        bound.append(('name', a))
      elif k in sig:
        bound.append((k, a))
      elif target.kind == 'class' and target.target.var_kw:
        var_kw[k] = a
      else:
        self.todo(original, f'unknown argument {k!r} of a legacy module')
        return updated
    catch_all = None
    if target.kind == 'layer':
      layer = target.target
      origin = {id(a): o for a, o in expanded}
      for k, a in list(bound):
        if (layer.legacy, k) in layer_table.UNSUPPORTED_ARGS:
          o = origin.get(id(a))
          if o is not None and not o.star and self.holds_none(o.value):
            # None, the legacy default: the default collection, linen's
            bound.remove((k, a))
            self.rewrote(original, 'collections', f'{k}=None dropped '
                         '(the default collection)')
            continue
          self.todo(original, layer_table.UNSUPPORTED_ARGS[(layer.legacy, k)])
          return updated
      inputs = [a for k, a in bound if k == 'inputs']
      # keyed by legacy keyword: the emitter spells them as the target's
      hypers = [plans.Hyper(k, a) for k, a in bound if k != 'inputs']
      call_args = inputs
      type_name = layer.legacy
      if layer.note:
        self.ctx.report.rewritten.append(
            {'rule': 'layers', 'line': self.ctx.line(original),
             'what': f'{layer.legacy}: {layer.note}'})
    else:
      layer = None
      info = target.target
      hypers, call_args = [], []
      splats = [a for k, a in bound if k == '**']
      given = {kk for kk, _ in bound}
      if len(splats) > 1:
        self.todo(original, 'several dicts splatted into one legacy module '
                  'call: split them by hand')
        return updated
      for k, a in bound:
        if k == 'name' or k in info.fields:
          hypers.append(plans.Hyper(k, a))
        elif k == '**':
          new = self._splat(original, info, a, splat_values.get(id(a)),
                            given, var_kw)
          if new is None:
            return updated
          hypers.append(plans.Hyper('**', new[0]))
          if new[1] is not None:
            call_args.append(cst.Arg(value=new[1], star='**'))
          if info.var_kw:
            var_kw = {}  # merged into the split
        else:
          call_args.append(a)
      if var_kw:
        catch_all = (info.var_kw,
                     tuple((k, a.value) for k, a in var_kw.items()))
      type_name = name_plan.type_name(target)
    name = None
    kind = _shared.name_kind(original, self.maybe_none)
    given = None
    partial_named = kind != 'named' and name_plan.partial_named(ref)
    if kind != 'named':
      # ``name=None`` is legacy's default; ``name=p`` (p's default None)
      # is the name unless None: the plan adds it
      given = next((h.arg.value for h in hypers if h.key == 'name'), None)
      hypers = [h for h in hypers if h.key != 'name']
      if kind == 'maybe' and partial_named:
        self.todo(original, MAYBE_PARTIAL_NAMED)
        return updated
    if kind != 'named' and not partial_named:
      if self.todo_all:
        self.todo(original, self.todo_all)
      ctor_src = None
      if type_name is None and isinstance(original.func, cst.Name):
        ctor_src = cst.Module([]).code_for_node(updated.func)
      name = self._auto_name_plan(original, type_name, ctor_src)
      if name is None and type_name is None:
        self.todo(original, 'cannot tell the legacy auto-name')
      if kind == 'maybe':
        if name is not None:
          name = dataclasses.replace(name, given=given)
        elif not self.dynamic and given is not None:
          # a helper method every call of which gives the name (its plan
          # ran it where it is called: rules/methods.py)
          hypers.append(plans.Hyper('name', cst_util.arg(given, 'name')))
        else:
          self.todo(original, MAYBE_UNKNOWN)
          return updated
    module = constructors.module_ref(self, ref, updated.func)
    self.rewrote(original, 'module_call', f'{type_name or "module"} call -> '
                 'construct + call')
    plan = plans.SubmoduleCall(
        module=module, hypers=tuple(hypers), inputs=tuple(call_args),
        layer=layer, direct_layer=ref.kind == 'layer', catch_all=catch_all,
        name=name)
    return self.construction(plan, self.emit.submodule_call(plan))

  def _splat(self, original, info, arg, legacy_value, given, var_kw):
    """``**d`` in a call of the legacy module ``info`` (rules/splat.py):
    (constructor Arg, call expression or None), or None after a TODO."""
    if not info.var_kw and set(info.call) <= given:
      # every call parameter passed explicitly: the keys are fields (or a
      # TypeError, as in legacy)
      return arg, None
    caller = self.info
    if (info.var_kw and legacy_value is not None
        and getattr(caller, 'var_kw', None) not in self.assigned_fields
        and splat.forwarded_whole(caller, info, legacy_value, given)):
      value = arg.value
      if var_kw:
        # the call's other keywords join it
        value = self.emit.catch_all_dict(plans.CatchAllDict(
            items=tuple((k, a.value) for k, a in var_kw.items()), base=value))
      self.rewrote(original, 'splat', f'**{info.var_kw} forwarded whole')
      return cst_util.arg(value, info.var_kw), None
    split, why = splat.runtime_split(
        self, info, arg.value, [(k, a.value) for k, a in var_kw.items()])
    if split is None:
      self.todo(original, why)
      return None
    self.rewrote(original, 'splat', f'**dict into {info.name}: split into '
                 'fields / catch-all at run time')
    return cst.Arg(value=split[0], star='**'), split[1]
