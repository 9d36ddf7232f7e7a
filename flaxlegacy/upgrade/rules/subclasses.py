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
* Anything else keeps its code with a TODO that says why: ``super()`` calls
  (the base's legacy ``apply`` has no linen counterpart to call), other
  methods next to ``apply`` (legacy module methods or overrides the base
  calls), an override of ``param`` (legacy layers call ``self.param(name,
  shape, init)``, linen layers ``self.param(name, init_fn, *init_args)``:
  the override does not carry over), a base with more than ``apply``.
"""

import libcst as cst

from flaxlegacy.upgrade import facts as facts_lib

# Legacy layers whose classes define nothing but ``apply`` (an ``apply``
# override replaces all of what they compute).
APPLY_ONLY_LAYERS = frozenset(('Dense', 'DenseGeneral', 'Conv',
                               'ConvTranspose', 'BatchNorm', 'LayerNorm',
                               'GroupNorm'))


def collect_facts(file_facts, module):
  """Per legacy class: its method names and whether it calls ``super()``."""
  shapes = {}
  for stmt in module.body:
    if not isinstance(stmt, cst.ClassDef) or (
        stmt.name.value not in file_facts.modules):
      continue
    methods = [s.name.value for s in stmt.body.body
               if isinstance(s, cst.FunctionDef)]
    found = []

    class V(cst.CSTVisitor):

      def visit_Call(self, node):
        if isinstance(node.func, cst.Name) and node.func.value == 'super':
          found.append(node)

    stmt.visit(V())
    shapes[stmt.name.value] = (methods, bool(found))
  file_facts.class_shapes = shapes


def _shape(codebase, info):
  f = codebase.files.get(info.file)
  return getattr(f, 'class_shapes', {}).get(info.name, ([], False))


def inherit_splits(codebase):
  """A subclass without ``apply`` of a user module takes the base's split."""
  for _ in range(8):  # chains of subclasses
    changed = False
    for f in codebase.files.values():
      for info in f.modules.values():
        if info.kind != 'class' or info.base == 'Module' or (
            info.problems != ['no apply method']):
          continue
        base = codebase.module(f, info.base)
        if base is None or base.problems or base.kind != 'class':
          continue
        methods, _ = _shape(codebase, info)
        if methods:
          continue  # overrides something: convert() says what
        for attr in ('params', 'defaults', 'var_kw', 'var_pos',
                     'array_params', 'child_calls', 'fields', 'call'):
          setattr(info, attr, getattr(base, attr))
        info.problems = []
        info.inherits = base.name
        changed = True
    if not changed:
      return


def convert(up, node, info, convert_plain):
  """Rewrites (or marks) a legacy module class whose base is not Module.

  ``convert_plain(node, info)`` converts a class as a plain ``nn.Module``
  subclass (rules/modules.py's ``convert_class``).
  """
  codebase = up.ctx.codebase
  base_name = info.base
  methods, uses_super = _shape(codebase, info)
  layer = base_name if facts_lib.legacy_attr(
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
  if 'param' in methods:
    why = ("overrides param: legacy layers call self.param(name, shape, "
           'init), linen ones self.param(name, init_fn, *init_args)')
  elif uses_super:
    why = 'calls super(): the legacy base apply has no linen counterpart here'
  elif 'apply' not in methods:
    why = 'no apply of its own'
  elif set(methods) - {'apply'}:
    why = (f'methods {sorted(set(methods) - {"apply"})} next to apply '
           '(legacy module methods or overrides of the base)')
  elif layer is not None and layer not in APPLY_ONLY_LAYERS:
    why = f'legacy {layer} has more than apply (e.g. module methods)'
  elif layer is None:
    base = codebase.module(up.ctx.facts, base_name)
    if base is None or base.kind != 'class':
      why = 'its base is not a legacy module class this upgrade sees'
    elif set(_shape(codebase, base)[0]) - {'apply'}:
      why = f'its base {base_name} has more than apply'
  if why is not None:
    kind = f'legacy {layer}' if layer else base_name
    up.todo(node, f'{info.name} subclasses {kind}: {why}; port by hand')
    return node
  # its own apply replaces everything the base computes
  prefix = sorted(up.ctx.facts.nn_prefixes)
  prefix = (prefix[0] if prefix else 'nn').replace(
      'flax.deprecated.nn', 'flax.linen').replace('flax.nn', 'flax.linen')
  bases = []
  for b in node.bases:
    if b.value is _base_expr(node, info):
      b = b.with_changes(value=cst.parse_expression(prefix + '.Module'))
    bases.append(b)
  new = convert_plain(node.with_changes(bases=bases), info)
  up.rewrote(node, 'subclass', f'class {info.name}({base_name}) overrides '
             'apply: a plain linen Module')
  return new


def _base_expr(node, info):
  for b in node.bases:
    name = facts_lib.dotted(b.value)
    if name and name.split('.')[-1] == info.base:
      return b.value
  return None
