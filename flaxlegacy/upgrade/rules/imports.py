"""Rule: legacy ``nn`` imports -> the target's module, under the same
local name.

The target's module is the emitter's spelling (``emitter.nn_module``:
``flax.linen`` for linen).  ``from flax import nn`` -> ``from flax import
linen as nn``; ``from flax.deprecated import nn`` -> the same; ``import
flax.nn as nn`` -> ``import flax.linen as nn``.  The local name stays, so
every ``nn.relu``, ``nn.initializers.zeros`` ... that the target spells the
same needs no change.
"""

import libcst as cst

from flaxlegacy.upgrade.cst_util import LEGACY_NN_MODULES
from flaxlegacy.upgrade.cst_util import dotted


def rewrite_import_from(node, module):
  """The ImportFrom of the target's ``module`` (dotted: ``flax.linen``)
  for a legacy one, or None."""
  if node.relative or node.module is None or isinstance(node.names,
                                                          cst.ImportStar):
    return None
  mod = dotted(node.module)
  submodule = _same_submodule(mod, node.names, module)
  if submodule is not None:
    return node.with_changes(module=cst.parse_expression(submodule))
  if mod not in ('flax', 'flax.deprecated'):
    return None
  package, name = module.rsplit('.', 1)
  names, changed = [], False
  for a in node.names:
    if dotted(a.name) == 'nn':
      local = a.asname.name.value if a.asname else 'nn'
      names.append(a.with_changes(name=cst.Name(name),
                                  asname=cst.AsName(name=cst.Name(local))))
      changed = True
    else:
      names.append(a)
  if not changed:
    return None
  if mod == 'flax.deprecated':
    if len(names) != 1:
      return None
    return node.with_changes(module=cst.parse_expression(package),
                             names=names)
  return node.with_changes(names=names)


# Legacy nn submodules whose every public name linen has, computing the
# same (both re-export jax.nn's initializers / activations).
SAME_SUBMODULES = ('initializers', 'activation')


def _same_submodule(mod, names, module):
  """``from flax.nn import initializers`` / ``from flax.deprecated.nn.
  initializers import zeros``: the target's module to import from (under
  the target's ``module``), or None."""
  for legacy in LEGACY_NN_MODULES:
    if mod == legacy and all(dotted(a.name) in SAME_SUBMODULES
                             for a in names):
      return module
    for sub in SAME_SUBMODULES:
      if mod == f'{legacy}.{sub}':
        return f'{module}.{sub}'
  return None


def rewrite_import(node, module):
  """The Import of the target's ``module`` for ``import flax.nn as x``,
  or None."""
  names, changed = [], False
  for a in node.names:
    full = dotted(a.name)
    if full in LEGACY_NN_MODULES and a.asname is not None:
      names.append(a.with_changes(name=cst.parse_expression(module)))
      changed = True
    else:
      names.append(a)
  return node.with_changes(names=names) if changed else None


def is_legacy_import(node):
  """Imports of legacy API the module rules do not rewrite (optim ...)."""
  if isinstance(node, cst.ImportFrom):
    if node.relative or node.module is None:
      return None
    mod = dotted(node.module)
    if isinstance(node.names, cst.ImportStar):
      names = ['*']
    else:
      names = [dotted(a.name) for a in node.names]
    for n in names:
      full = f'{mod}.{n}'
      for root in ('flax.nn', 'flax.optim', 'flax.deprecated'):
        if mod == root or mod.startswith(root + '.') or full == root:
          return full
    return None
  for a in node.names:
    full = dotted(a.name)
    for root in ('flax.nn', 'flax.optim', 'flax.deprecated'):
      if full == root or full.startswith(root + '.'):
        return full
  return None
