"""Subclasses of user modules and of legacy layers.

The facts pass records a class as a legacy module when one of its bases is
``nn.Module``, a legacy layer (``nn.Dense``) or a legacy module class defined
earlier in the same file; ``ModuleInfo.base`` names that base.  What the
rewrite does with a class whose base is not ``nn.Module``:

* **No ``apply`` of its own, base a user module** (``class Wide(Block):``
  with a docstring, ``pass`` or class constants): it computes what its base
  computes.  The class keeps its code (a linen dataclass subclass of the
  upgraded base has the same fields and ``__call__``) and inherits the
  base's split of fields and call parameters, so its callers are rewritten
  like the base's.
* **Its own ``apply``, base a legacy layer whose legacy class has nothing but
  ``apply``** (Dense, DenseGeneral, Conv, ConvTranspose, BatchNorm,
  LayerNorm, GroupNorm), **or base a user module with nothing but
  ``apply``**: legacy runs only the subclass's ``apply``, so it is converted
  as a plain ``nn.Module`` (its legacy auto-name is its own class name
  either way).
* **Nothing but a ``param`` override, base a legacy layer whose linen
  counterpart creates its parameters through ``self.param``** (Dense,
  DenseGeneral, Conv, ConvTranspose, LayerNorm, GroupNorm; weight-
  standardized convolutions: ``class StdConv(nn.Conv)`` with ``def
  param(self, name, shape, initializer)`` returning a standardized
  kernel): a subclass of the linen layer whose ``param`` override takes
  linen's order, ``param(self, name, initializer, shape, *init_args,
  **init_kwargs)``, its ``super().param(name, shape, initializer)`` becoming
  ``super().param(name, initializer, shape, *init_args, **init_kwargs)``
  (the body is otherwise unchanged: ``shape`` and ``initializer`` hold what
  they held).  Its calls are rewritten like calls of the base layer
  (linen keywords, construct + call), constructing the subclass.  The
  override must take exactly ``(self, name, shape, initializer)`` and call
  nothing of ``super()`` but ``param`` with those three arguments.
* Anything else keeps its code with a TODO that says why: ``super()`` calls
  (the base's legacy ``apply`` has no linen counterpart to call), other
  methods next to ``apply`` (legacy module methods or overrides the base
  calls), another override of ``param``, a base with more than ``apply``.

What is decided here are plans (upgrade/plans.py: ``LayerBase``,
``ParamOverride`` with its ``SuperParam`` calls, ``PlainModuleBase``) that
the rewriter's emitter writes (``up.emit``).
"""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import layer_table
from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade import walk
from flaxlegacy.upgrade.collectors import subclasses as subclass_facts

# Legacy layers whose classes define nothing but ``apply`` (an ``apply``
# override replaces all of what they compute).
APPLY_ONLY_LAYERS = frozenset(('Dense', 'DenseGeneral', 'Conv',
                               'ConvTranspose', 'BatchNorm', 'LayerNorm',
                               'GroupNorm'))
# Legacy layers whose linen counterparts (layer_table.py) create every
# parameter with ``self.param(name, init_fn, shape[, dtype])``, under the
# legacy names: a ``param`` override carries over.
PARAM_LAYERS = frozenset(('Dense', 'DenseGeneral', 'Conv', 'ConvTranspose',
                          'LayerNorm', 'GroupNorm'))


def param_layer(codebase, info):
  """The layer_table.py Layer a legacy layer subclass whose only method
  is a ``param`` override that carries over is called as (constructing the
  subclass itself), or None."""
  if info is None or info.kind != 'class' or info.base not in PARAM_LAYERS:
    return None
  f = codebase.files.get(info.file)
  overrides = getattr(f, 'param_overrides', {})
  if info.name not in overrides or overrides[info.name] is not None:
    return None
  if info.problems != ['no apply method']:
    return None
  base = layer_table.LAYERS.get(info.base)
  if base is None:
    return None
  return base._replace(legacy=info.name, linen=info.name)


def is_user_layer(layer):
  """A Layer from ``param_layer`` (its constructor is the user's class)."""
  return layer_table.LAYERS.get(layer.legacy) is not layer and (
      layer.legacy == layer.linen)


class _SuperParams(walk.FastVisitor):
  """The ``super().param(name, shape, initializer)`` calls of a body."""

  def __init__(self):
    self.calls = []

  def visit_Call(self, node):
    if subclass_facts.super_param_call(node):
      args = subclass_facts.super_param_args(
          node, subclass_facts.LEGACY_PARAM_ARGS)
      if args is not None:
        self.calls.append(plans.SuperParam(node, *args))


def convert_param_override(up, node, info, layer):
  """``class StdConv(nn.Conv): def param(self, name, shape, init)`` ->
  a subclass of the target's layer whose ``param`` override takes its
  argument order (plans LayerBase, ParamOverride)."""
  del layer
  base_expr = _base_expr(node, info)
  new_base = up.emit.layer_base(plans.LayerBase(layer_table.LAYERS[info.base]))
  bases = [b.with_changes(value=new_base) if b.value is base_expr else b
           for b in node.bases]
  body = []
  for stmt in node.body.body:
    if isinstance(stmt, cst.FunctionDef) and stmt.name.value == 'param':
      supers = _SuperParams()
      stmt.body.visit(supers)
      fn = up.emit.param_override(plans.ParamOverride(
          fn=stmt, super_calls=tuple(supers.calls)))
      stmt = fn.visit(up)  # the generic rules (removed JAX names ...)
    body.append(stmt)
  up.rewrote(node, 'subclass', f'class {info.name}(nn.{info.base}) '
             'overrides param: a linen subclass of the layer, param in '
             "linen's argument order")
  return node.with_changes(bases=bases,
                           body=node.body.with_changes(body=body))


def convert(up, node, info, convert_plain):
  """Rewrites (or marks) a legacy module class whose base is not Module.

  ``convert_plain(node, info)`` converts a class as a plain ``nn.Module``
  subclass (rules/modules.py's ``convert_class``).
  """
  codebase = up.ctx.codebase
  base_name = info.base
  methods, uses_super = subclass_facts.class_shape(codebase, info)
  layer = base_name if cst_util.legacy_attr(
      _base_expr(node, info), up.ctx.facts.nn_prefixes) else None
  if getattr(info, 'inherits', None):
    up.rewrote(node, 'subclass', f'class {info.name}({base_name}): no apply '
               'of its own; inherits the upgraded base')
    up.ctx.report.modules.append(info.report())
    base = codebase.module(up.ctx.facts, base_name)
    if codebase.names_mode == 'linen' and base is not None:
      # --names linen: its submodules are its base's (rules/linen_names.py)
      up.ctx.report.renames.append({
          'file': info.file, 'class': info.name,
          'inherits': f'{base.file}:{base.name}'})
    return node
  why = None
  layer_of = param_layer(codebase, info)
  if layer_of is not None:
    return convert_param_override(up, node, info, layer_of)
  if 'param' in methods:
    why = getattr(codebase.files.get(info.file), 'param_overrides', {}).get(
        info.name) if info.base in PARAM_LAYERS else None
    why = 'overrides param: ' + (why or (
        'legacy layers call self.param(name, shape, init), linen ones '
        'self.param(name, init_fn, *init_args)'))
  elif uses_super:
    why = 'calls super(): the legacy base apply has no linen counterpart here'
  elif 'apply' not in methods:
    why = 'no apply of its own'
  elif set(methods) - {'apply'}:
    why = (f'methods {sorted(set(methods) - {"apply"})} next to apply '
           '(legacy module methods or overrides of the base)')
  elif layer is not None and layer not in APPLY_ONLY_LAYERS:
    why = f'legacy {layer} has more than apply (e.g. module methods)'
  abstract = False
  if why is None and layer is None:
    base = codebase.module(up.ctx.facts, base_name)
    if base is None or base.kind != 'class':
      why = 'its base is not a legacy module class this upgrade sees'
    elif set(subclass_facts.class_shape(codebase, base)[0]) - {'apply'}:
      why = f'its base {base_name} has more than apply'
    elif abstract_base(codebase, base):
      abstract = True
    elif subclass_facts.class_level_methods(codebase, base):
      why = (f'its base {base_name} has classmethods / staticmethods, which '
             'a plain linen Module would not inherit')
  if why is not None:
    kind = f'legacy {layer}' if layer else base_name
    up.todo(node, f'{info.name} subclasses {kind}: {why}; port by hand')
    return node
  if abstract:
    # a base with nothing but classmethods (rules/modules.py keeps it a
    # linen Module with no fields): the subclass keeps it
    new = convert_plain(node, info)
    up.rewrote(node, 'subclass', f'class {info.name}({base_name}): its own '
               'apply on an abstract base of classmethods: a linen Module '
               'subclass of that base')
    return new
  # its own apply replaces everything the base computes
  base_expr = _base_expr(node, info)
  bases = []
  for b in node.bases:
    if b.value is base_expr:
      b = b.with_changes(value=up.emit.plain_module_base(
          plans.PlainModuleBase(base_expr)))
    bases.append(b)
  new = convert_plain(node.with_changes(bases=bases), info)
  up.rewrote(node, 'subclass', f'class {info.name}({base_name}) overrides '
             'apply: a plain linen Module')
  return new


def abstract_base(codebase, info):
  """Whether a legacy module class ``info`` is an abstract base: a direct
  ``nn.Module`` subclass with no ``apply`` and no methods but classmethods
  / staticmethods (a model zoo's ``BaseModel`` of factories)."""
  return (info.kind == 'class' and info.base == 'Module'
          and info.problems == ['no apply method']
          and not subclass_facts.class_shape(codebase, info)[0]
          and bool(subclass_facts.class_level_methods(codebase, info)))


def _base_expr(node, info):
  for b in node.bases:
    name = cst_util.dotted(b.value)
    if name and name.split('.')[-1] == info.base:
      return b.value
  return None
