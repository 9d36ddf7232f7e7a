"""``Resolver``: what a callee expression denotes in one body (a legacy
layer, a legacy module class, a ``.partial`` / ``.shared`` of one, legacy
attention, ``nn.dropout``, a local module instance), from the file's facts,
the codebase's aliases and hyper-parameters, and what flow.py says a name
can hold.  Used by a file's ``Upgrader`` (rules/rewriter.py), the
``.partial`` rules (rules/partials.py) and a module body's rewriter
(rules/apply_rewriter.py)."""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import flow as flow_lib
from flaxlegacy.upgrade import layer_table
from flaxlegacy.upgrade.rules import _shared
from flaxlegacy.upgrade.rules import aliases as aliases_rule
from flaxlegacy.upgrade.rules import attention as attention_rule
from flaxlegacy.upgrade.rules import called_layers
from flaxlegacy.upgrade.rules import runtime_modules
from flaxlegacy.upgrade.rules import subclasses


class Resolver:
  """What a callee expression denotes, in one body."""

  def __init__(self, up, local_vars, flow_ok=True):
    self.up = up
    self.locals = local_vars
    self.why_not = {}  # name -> why a call of it is not rewritten
    # flow.py facts are about the legacy source's nodes: only for
    # expressions of the original tree
    self.flow_ok = flow_ok
    # off while a body's local aliases are being resolved (_LocalScan):
    # a local not known yet is not an unknown value
    self.flow_names = True
    # how the expression being resolved is used: called (None) or
    # ``X.partial(...)`` ... (flow.usable: what a working program can hold)
    self.use = None

  def used_as(self, expr, use):
    """``self(expr)`` for an expression used as ``expr.<use>(...)``."""
    saved, self.use = self.use, use
    try:
      return self(expr)
    finally:
      self.use = saved

  def from_flow(self, expr):
    """(Ref or None, why or None) from what ``expr`` can hold."""
    values = self.up.flow_values(expr) if hasattr(self.up,
                                                   'flow_values') else None
    if values is None:
      return None, None
    name = self.up.ctx.code_of(expr)
    if isinstance(expr, cst.Name):
      flow = self.up.ctx.codebase.flow
      why = flow.contradiction(self.up.ctx.facts.path, self.up.qual(),
                               expr.value)
      if why:  # --observe: the run and the source disagree
        return None, f'{name!r}: {why}; rewrite its uses by hand'
    choice, why = flow_lib.module_choice(self.up.ctx.codebase, values,
                                         use=self.use)
    if choice is None and why and self.use is None:
      # layers, classes of different fields, functions: called legacy-style,
      # split at run time where every value is known (called_layers.py)
      ref, why2 = called_layers.check(self.up.ctx.codebase, values)
      if ref is not None:
        return ref, None
      why = why2 or why
    if choice is None:
      return None, (f'{name!r}: {why}; rewrite its uses by hand' if why
                    else None)
    if choice[0] == 'layer':
      layer = layer_table.LAYERS.get(choice[1])
      if layer is None or layer.linen in layer_table.SHIPPED:
        return None, (f'{name!r} holds legacy {choice[1]}, which this '
                      'upgrade does not pass around')
      missing = [k for k in layer.add_kwargs
                 if any(k not in kws for kws in choice[2])]
      if missing and any(choice[2]):
        return None, (f'{name!r} holds legacy {choice[1]}, sometimes '
                      f'without {missing}, which linen needs for the legacy '
                      'numbers')
      inner = _shared.Ref('layer', layer, None)
      return (_shared.Ref('partial', inner, None) if any(choice[2]) else inner), None
    return _shared.Ref('class', choice[1][0], 'field'), None

  def __call__(self, expr):
    ctx = self.up.ctx
    attr = cst_util.legacy_attr(expr, ctx.facts.nn_prefixes)
    if attr is not None:
      if attention_rule.legacy_name(attr):
        return _shared.Ref('attention', attr, None)
      if attr in layer_table.LAYERS:
        return _shared.Ref('layer', layer_table.LAYERS[attr], None)
      if attr == 'dropout':
        return _shared.Ref('dropout', None, None)
      return None
    if isinstance(expr, cst.Name):
      if expr.value in self.locals:
        return self.locals[expr.value]
      # a hyper-parameter holding a module; an alias X = M.partial(...)
      ref, why = aliases_rule.resolve_field_module(self, expr.value)
      if ((ref is not None and ref.kind == 'class' or why)
          and self.use is None and self.flow_ok
          and hasattr(self.up, 'flow_values')):
        # the classes the codebase gives it (flow.py) may split their
        # keywords otherwise than its default does: split at run time (a
        # function among them takes the call as written: called_layers.py)
        values = self.up.flow_values(expr)
        ref2, why2 = called_layers.with_functions(self.up.ctx.codebase,
                                                  values)
        if ref2 is None and not why2:
          ref2, why2 = runtime_modules.check(self.up.ctx.codebase, values,
                                             ref)
        if ref2 is not None and ref2.extra in ('runtime',
                                               called_layers.EXTRA):
          ref, why = ref2, None
        elif why2:
          ref, why = None, f'{expr.value!r}: {why2}'
      if ref is None and (why or expr.value in getattr(self.up, 'fields',
                                                       ())):
        # what the codebase binds it to, followed through values (flow.py)
        ref2, why2 = self.from_flow(expr)
        if ref2 is not None:
          ref, why = ref2, None
        elif why2 and not why:
          why = why2
      if ref is None and not why:
        # a hyper-parameter whose default is a legacy attention class
        # (rules/attention.py: called through a run-time check)
        ref, why = attention_rule.field_attention(self, expr)
      if why:
        self.why_not[expr.value] = why
      if ref is not None or why:
        return ref
      info = ctx.codebase.module(ctx.facts, expr.value)
      if info is not None and not info.problems:
        return _shared.Ref('class', info, None)
      layer = subclasses.param_layer(ctx.codebase, info)
      if layer is not None:  # class StdConv(nn.Conv) overriding param
        return _shared.Ref('layer', layer, None)
      ref = aliases_rule.resolve_alias(self, expr.value)
      if ref is None and self.flow_ok and self.flow_names:
        ref, why = self.from_flow(expr)
        if why:
          self.why_not[expr.value] = why
      return ref
    if (isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name)
        and expr.value.value not in self.locals):
      # module.Class, ``module`` an imported file of the codebase
      f = ctx.codebase.imported_file(ctx.facts, expr.value.value)
      info = f.modules.get(expr.attr.value) if f is not None else None
      if info is not None and not info.problems:
        return _shared.Ref('class', info, None)
      layer = subclasses.param_layer(ctx.codebase, info)
      if layer is not None:
        return _shared.Ref('layer', layer, None)
    if isinstance(expr, (cst.Attribute, cst.Subscript)) and self.flow_ok:
      # self.network, KNOWN_MODELS[name]: what it holds (flow.py)
      ref, why = self.from_flow(expr)
      if why:
        self.why_not[self.up.ctx.code_of(expr)] = why
      return ref
    if isinstance(expr, cst.Call):
      f = expr.func
      if isinstance(f, cst.Attribute) and f.attr.value in ('partial',
                                                           'shared'):
        inner = self.used_as(f.value, f.attr.value)
        if inner is not None and (inner.kind in ('layer', 'class') or (
            inner.kind == 'partial' and f.attr.value == 'partial')):
          return _shared.Ref(f.attr.value, inner, expr)
      target, _ = ctx.codebase.partial_helper(ctx.facts, f)
      if target is not None:  # helper() / module.helper() -> X.partial
        inner = self(cst_util.expr(target))
        if inner is not None and inner.kind in ('layer', 'class'):
          return _shared.Ref('partial', inner, expr)
      return None
    if isinstance(expr, cst.IfExp):
      a, b = self(expr.body), self(expr.orelse)
      if (a is not None and b is not None and a.kind == b.kind == 'class'
          and a.target.fields == b.target.fields
          and a.target.call == b.target.call):
        return _shared.Ref('class', a.target, 'ambiguous')
    return None
