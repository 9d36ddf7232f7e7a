"""``X.partial(...)`` of legacy modules -> ``functools.partial`` (or
``partial_module``, split at run time).

* ``partial_call``: ``X.partial(**kw)`` of a layer, a class or a partial of
  one -> ``functools.partial(X, **kw)``, legacy layer keywords renamed,
  a class's ``**`` catch-all and splatted dicts split (rules/splat.py);
  used by a file's ``Upgrader`` and a module body's rewriter alike;
* ``module_level_partial_visit`` / ``module_level_partial_leave``: the
  cases a file's ``Upgrader.visit_Call`` / ``leave_Call`` try for
  ``X.partial`` outside module bodies;
* ``_classes_partial``: ``X.partial`` of a value flow.py knows holds legacy
  module classes of different parameters.
"""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import flow as flow_lib
from flaxlegacy.upgrade import layer_table
from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade.collectors import aliases as alias_facts
from flaxlegacy.upgrade.rules import constructors
from flaxlegacy.upgrade.rules import drivers
from flaxlegacy.upgrade.rules import splat
from flaxlegacy.upgrade.rules.resolver import Resolver  # pylint: disable=g-importing-member


def partial_call(up, original, updated, inner):
  """``X.partial(**kw)`` -> the PartialModule plan (upgrade/plans.py:
  ``functools.partial(X, **kw)``)."""
  args = list(updated.args)
  if any(a.keyword is None and not a.star for a in args):
    up.todo(original, '.partial with positional arguments')
    return updated
  layer = None
  if inner.kind == 'layer':
    layer = inner.target
    for a in args:
      if (layer.legacy, cst_util.kw(a)) in layer_table.UNSUPPORTED_ARGS:
        up.todo(original, layer_table.UNSUPPORTED_ARGS[(layer.legacy,
                                                        cst_util.kw(a))])
        return updated
  else:
    root = constructors.partial_root(inner)
    fields = root.target.fields if root.kind == 'class' else []
    if root.kind == 'layer':
      layer = root.target
      fields = [layer_table.linen_kwarg(layer, p) for p in layer.params]
      # (linen's keywords: a legacy one or linen's own are bound)
      given = [k if k in (None, 'name') else layer_table.linen_kwarg(layer, k)
               for k in map(cst_util.kw, args)]
    else:
      given = None
    if root.kind == 'class' and (root.target.var_kw or any(
        a.star == '**' for a in args)):
      args = _partial_class_kwargs(up, original, root.target, args)
      if args is None:
        return updated
    # (a layer has no catch-all: only a class's ``**kwargs`` takes more)
    known = fields + ['name'] + (
        [root.target.var_kw] if root.kind == 'class' else [])
    if given is None:
      given = [cst_util.kw(a) for a in args]
    bad = [k for k in given if k and k not in known]
    if bad:
      up.todo(original, f'.partial binds call parameters {bad}')
      return updated
  up.rewrote(original, 'partial', '.partial -> functools.partial')
  return up.emit.partial_module(plans.PartialModule(
      module=constructors.module_ref(up, inner, updated.func.value),
      hypers=tuple(plans.Hyper(cst_util.kw(a) or a.star, a) for a in args),
      layer=layer, direct_layer=inner.kind == 'layer'))


def _partial_class_kwargs(up, original, info, args):
  """The keywords of ``X.partial(...)`` for a class with a ``**`` catch-all
  or given a splatted dict: keys that are not parameters go into the
  catch-all field; a dict is split at run time (rules/splat.py).  None
  after a TODO."""
  splats = [a for a in args if a.star == '**']
  extra = [(a.keyword.value, a.value) for a in args if a.keyword is not None
           and a.keyword.value not in info.params + ['name']]
  if not splats and not (extra and info.var_kw):
    return args
  out = [a for a in args if not a.star and (
      a.keyword is None or a.keyword.value in info.params + ['name'])]
  if len(splats) > 1:
    up.todo(original, 'several dicts splatted into one .partial: split them '
            'by hand')
    return None
  if not splats:
    return out + [cst_util.arg(up.emit.catch_all_dict(plans.CatchAllDict(
        items=tuple(extra))), info.var_kw)]
  if not info.var_kw and len(info.call) <= 1:
    return args  # its keys can only be fields (or a TypeError, as legacy)
  if not info.var_kw:
    up.todo(original, 'a dict splatted into .partial of a module with call '
            'parameters: its keys are not known here')
    return None
  if len(info.call) > 1:
    up.todo(original, 'a dict splatted into .partial of a module with call '
            'parameters and a ** catch-all: its keys are not known here')
    return None
  split, why = splat.runtime_split(up, info, splats[0].value, extra)
  if split is None:
    up.todo(original, why)
    return None
  up.rewrote(original, 'splat', f'**dict into {info.name}.partial: split '
             'into fields / catch-all at run time')
  return out + [cst.Arg(value=split[0], star='**')]


def module_level_partial_visit(up, node):
  """Marks ``X.partial`` callees a rule will consume (for the leftovers);
  legacy layers passed to a wrapper that drives them (rules/drivers.py)."""
  f = node.func
  target, helper_facts = up.ctx.codebase.partial_helper(up.ctx.facts, f)
  if target is not None:
    info = alias_facts.root_info(up.ctx.codebase, helper_facts,
                                  target.split('.')[-1])
    name = f.value if isinstance(f, cst.Name) else f.attr.value
    if info is not None:
      drivers.layer_values(up, node, info,
                           helper_facts.partial_helper_binds.get(name, {}))
  elif isinstance(f, cst.Attribute) and f.attr.value == 'partial':
    info = alias_facts.root_info(up.ctx.codebase, up.ctx.facts,
                                  cst_util.dotted(f.value) and cst_util.dotted(
                                      f.value).split('.')[-1])
    if info is not None:
      drivers.layer_values(up, node, info)
  if isinstance(f, cst.Attribute) and f.attr.value == 'partial':
    if Resolver(up, {})(f.value) is not None:
      up._handled.add(id(f.value))  # pylint: disable=protected-access
      up._handled.add(id(f))  # pylint: disable=protected-access


def module_level_partial_leave(up, original_node, updated_node):
  """``X.partial(...)`` outside module bodies -> ``functools.partial``."""
  f = original_node.func
  if isinstance(f, cst.Attribute) and f.attr.value == 'partial':
    resolver = Resolver(up, {})
    inner = resolver.used_as(f.value, 'partial')
    if inner is not None and inner.kind in ('layer', 'class', 'partial'):
      return partial_call(up, original_node, updated_node, inner)
    if inner is None:
      new = _classes_partial(up, original_node, updated_node)
      if new is not updated_node:
        return new
    why = resolver.why_not.get(up.ctx.code_of(f.value))
    if why:  # what the facts say it holds (the TODO says it)
      up.partial_why = getattr(up, 'partial_why', {})
      up.partial_why[id(original_node)] = why
  return updated_node


def _classes_partial(up, original, updated):
  """``X.partial(k=v)`` where X holds legacy module classes of different
  parameters (an agent's ``network`` argument, its subclasses passing
  their own ``.partial`` of another class): ``functools.partial(X, k=v)``
  when every keyword is a field of every class X can hold (the values
  flow.py names; an unknown one is a class the codebase is configured
  with)."""
  vals = up.flow_values(original.func.value) if hasattr(
      up, 'flow_values') else None
  if vals:
    # only what a working program can hold where ``.partial`` is used
    # (flow.usable: a plain class without it is dropped)
    vals = flow_lib.usable(vals, 'partial',
                           getattr(up.ctx.codebase, 'flow', None))
  if not vals:
    return updated
  kinds = {v[0] for v in vals}
  if _mixed(vals):
    return _mixed_partial(up, original, updated, vals)
  if 'class' not in kinds or not kinds <= {'class', 'unknown'}:
    return updated
  args = list(updated.args)
  if any(a.keyword is None and a.star != '**' for a in args):
    return updated  # positional or * arguments: the TODO stays
  runtime = False
  for v in vals:
    if v[0] != 'class':
      continue
    f = up.ctx.codebase.files.get(v[1])
    info = f.modules.get(v[2]) if f is not None else None
    if info is None or info.problems or info.var_kw:
      return updated
    if any(a.keyword is None or a.keyword.value not in info.fields + ['name']
           for a in args):
      runtime = True
  if runtime:
    # ``**kwargs``, or keywords some class takes at its call: split by the
    # class at run time (legacy_model.partial_module), when every value is
    # a class the upgrade converts (an unknown one may take anything)
    if 'unknown' in kinds:
      return updated
    up.rewrote(original, 'partial', '.partial of module classes of '
               'different parameters -> partial_module (keywords split '
               'at run time)')
  else:
    up.rewrote(original, 'partial', '.partial of module classes known by '
               'their values -> functools.partial')
  return up.emit.partial_module(plans.PartialModule(
      module=plans.ModuleRef(expr=updated.func.value),
      hypers=tuple(plans.Hyper(cst_util.kw(a) or a.star, a) for a in args),
      runtime=runtime))


def _mixed(vals):
  kinds = {v[0] for v in vals}
  return 'layer' in kinds and kinds <= {'class', 'layer'} and len(vals) > 1


def mixed_partial(up, original, updated):
  """In a module body: ``X.partial(k=v)`` where X holds legacy layers and
  module classes (``_mixed_partial``), or None where X holds something
  else; ``updated`` after a TODO where the rewrite is not certain (it was
  left as written, a ``.partial`` linen classes do not have)."""
  vals = up.flow_values(original.func.value) if hasattr(
      up, 'flow_values') else None
  vals = flow_lib.usable(vals or (), 'partial',
                         getattr(up.ctx.codebase, 'flow', None))
  if not _mixed(vals):
    return None
  new = _mixed_partial(up, original, updated, vals)
  if new is updated:
    up.todo(original, f'{up.ctx.code_of(original.func)}(...): '
            f'{up.ctx.code_of(original.func.value)!r} holds legacy layers '
            'and module classes, and these keywords cannot be bound for '
            'both (a keyword some class takes at its call, a splatted '
            'dict, a layer lacking an argument linen needs): rewrite it by '
            'hand')
  return new


def _mixed_partial(up, original, updated, vals):
  """``X.partial(k=v)`` where X holds legacy layers and module classes of
  the codebase (``conv = StdConv if ws else nn.Conv``), all known:
  ``functools.partial(X, k=v)`` where every class spells the keywords
  alike, else (a layer keyword linen spells otherwise: ``bias`` ->
  ``use_bias``) a partial that gives them the linen spelling where X holds
  one of the layers when the code runs (``_legacy_partial``); keywords
  that a class takes at its call, a splatted dict, or a layer lacking an
  argument linen needs for the legacy numbers: the TODO stays."""
  args = list(updated.args)
  if any(a.keyword is None or a.star for a in args):
    return updated
  keys = [a.keyword.value for a in args if a.keyword.value != 'name']
  layers, renames = [], {}
  for v in sorted(vals, key=repr):
    if v[0] == 'layer':
      layer = layer_table.LAYERS.get(v[1])
      if layer is None or layer.linen in layer_table.SHIPPED and not v[2]:
        return updated  # (the shipped version only through a .partial)
      if any(k not in layer.params
             or (layer.legacy, k) in layer_table.UNSUPPORTED_ARGS
             for k in keys):
        return updated
      if any(k not in v[2] and k not in keys for k in layer.add_kwargs):
        return updated
      for k in keys:
        if renames.setdefault(k, layer_table.linen_kwarg(layer, k)) != (
            layer_table.linen_kwarg(layer, k)):
          return updated  # (layers spelling a keyword differently)
      if layer not in layers:
        layers.append(layer)
    else:
      f = up.ctx.codebase.files.get(v[1])
      info = f.modules.get(v[2]) if f is not None else None
      if info is None or info.problems or info.var_kw:
        return updated
      if any(k not in info.fields for k in keys):
        return updated  # a call keyword: split by class at run time
  renames = {k: r for k, r in renames.items() if k != r}
  up.rewrote(original, 'partial', '.partial of a value holding legacy '
             'layers and module classes -> ' + (
                 'a partial renaming layer keywords at run time' if renames
                 else 'functools.partial'))
  return up.emit.partial_module(plans.PartialModule(
      module=plans.ModuleRef(expr=updated.func.value),
      hypers=tuple(plans.Hyper(cst_util.kw(a), a) for a in args),
      renamed_for=tuple(layers) if renames else (),
      renames=tuple(sorted(renames.items()))))
