"""Rule: removed JAX names -> their modern spelling.

Reads flaxlegacy/_names.py (``JAX_ALIASES`` and the ``jax.*`` entries of
``MODULES``), the same table the import hook serves and ``flaxlegacy check``
scans for, so the three cannot disagree.  Table values of the form
``'module:attr'`` are plain renames; ``'@name'`` values are small functions
in flaxlegacy/_activate.py, rewritten here call by call (``CALLS``).
"""

import libcst as cst

from flaxlegacy import _names
from flaxlegacy.upgrade.facts import dotted

# qualified legacy name -> qualified modern name (plain renames).
RENAMES = {}
# qualified legacy name -> why it is left with a TODO.
UNSURE = {}
for _a in _names.JAX_ALIASES:
  _q = f'{_a.owner}.{_a.name}'
  if not _a.value.startswith('@'):
    _mod, _attr = _a.value.split(':')
    if _mod == 'numpy':
      _mod = 'jax.numpy'  # jax.ops.index -> jnp.s_ (numpy's own s_)
    RENAMES[_q] = f'{_mod}.{_attr}'
CALLS = ('jax.ops.index_update', 'jax.ops.index_add', 'jax.ops.index_mul',
         'jax.ops.index_min', 'jax.ops.index_max', 'jax.lax.tie_in',
         'jax.random.shuffle')
_AT_METHOD = {'index_update': 'set', 'index_add': 'add',
              'index_mul': 'multiply', 'index_min': 'min', 'index_max': 'max'}
for _a in _names.JAX_ALIASES:
  _q = f'{_a.owner}.{_a.name}'
  if _a.value.startswith('@') and _q not in CALLS:
    UNSURE[_q] = f'{_q} was removed from JAX; today: {_a.modern}'
# Removed module paths (import statements): legacy -> modern module.
MODULE_RENAMES = {e.legacy: e.target for e in _names.MODULES
                  if e.legacy.startswith('jax.') and e.target}


def qualify(node, imports):
  """The fully qualified dotted name of ``node`` through the file's imports."""
  name = dotted(node)
  if not name:
    return None
  head, _, rest = name.partition('.')
  full = imports.get(head)
  if full is None:
    return None
  return full + ('.' + rest if rest else '')


def spell(qualified, imports):
  """``qualified`` written with a name the file imports (longest match)."""
  best = None
  for local, full in imports.items():
    if qualified == full or qualified.startswith(full + '.'):
      if best is None or len(full) > len(best[1]):
        best = (local, full)
  if best is None:
    return qualified  # fully qualified; needs ``import jax``
  return best[0] + qualified[len(best[1]):]


def expr(src):
  return cst.parse_expression(src)


def rewrite_call(node, q, imports, code_of):
  """A rewritten expression for a call of a removed ``@`` function, or None."""
  args = node.args
  if any(a.star for a in args):
    return None
  pos = [a for a in args if a.keyword is None]
  kw = {a.keyword.value: a.value for a in args if a.keyword is not None}
  short = q.split('.')[-1]
  if short in _AT_METHOD and len(pos) == 3 and not kw:
    x, i, y = (code_of(a.value) for a in pos)
    return expr(f'({x}).at[{i}].{_AT_METHOD[short]}({y})'
                if not isinstance(pos[0].value, (cst.Name, cst.Attribute,
                                                 cst.Subscript, cst.Call))
                else f'{x}.at[{i}].{_AT_METHOD[short]}({y})')
  if q == 'jax.lax.tie_in' and len(pos) == 2 and not kw:
    return pos[1].value
  if q == 'jax.random.shuffle' and len(pos) >= 2 and set(kw) <= {'axis'}:
    axis = code_of(pos[2].value) if len(pos) > 2 else (
        code_of(kw['axis']) if 'axis' in kw else '0')
    perm = spell('jax.random.permutation', imports)
    return expr(f'{perm}({code_of(pos[0].value)}, {code_of(pos[1].value)}, '
                f'{axis}, independent=True)')
  return None


def rename_import_from(node):
  """``from jax.config import config`` -> ``from jax import config`` etc."""
  if node.relative or node.module is None:
    return None
  mod = dotted(node.module)
  if isinstance(node.names, cst.ImportStar):
    return None
  if mod == 'jax.config' and all(
      dotted(a.name) == 'config' for a in node.names):
    return node.with_changes(module=cst.Name('jax'))
  if mod in MODULE_RENAMES and MODULE_RENAMES[mod]:
    return node.with_changes(module=expr(MODULE_RENAMES[mod]))
  # from jax.experimental import optimizers[, stax] -> from
  # jax.example_libraries import ...; names that stay keep their module
  moved, kept = {}, []
  for a in node.names:
    full = f'{mod}.{dotted(a.name)}'
    if full in MODULE_RENAMES and MODULE_RENAMES[full]:
      new_mod, _, new_name = MODULE_RENAMES[full].rpartition('.')
      asname = a.asname or (cst.AsName(name=cst.Name(dotted(a.name)))
                            if new_name != dotted(a.name) else None)
      moved.setdefault(new_mod, []).append(a.with_changes(
          name=cst.Name(new_name), asname=asname))
    else:
      kept.append(a)
  if moved:
    out = ([node.with_changes(names=_commas(kept))] if kept else []) + [
        node.with_changes(module=expr(m), names=_commas(names))
        for m, names in moved.items()]
    return out[0] if len(out) == 1 else cst.FlattenSentinel(out)
  # from jax import tree_multimap -> from jax.tree_util import tree_map as ..
  if len(node.names) == 1:
    a = node.names[0]
    full = f'{mod}.{dotted(a.name)}'
    if full in RENAMES:
      new_mod, _, new_name = RENAMES[full].rpartition('.')
      local = a.asname.name.value if a.asname else dotted(a.name)
      asname = (cst.AsName(name=cst.Name(local)) if local != new_name
                else None)
      return node.with_changes(
          module=expr(new_mod),
          names=[cst.ImportAlias(name=cst.Name(new_name), asname=asname)])
  return None


def _commas(names):
  names = list(names)
  return [a.with_changes(comma=cst.MaybeSentinel.DEFAULT) if i == len(
      names) - 1 else a.with_changes(comma=cst.Comma(
          whitespace_after=cst.SimpleWhitespace(' ')))
          for i, a in enumerate(names)]


def rename_module_attribute(node, imports):
  """``jax.experimental.optimizers`` spelled out from ``jax`` (an
  attribute chain, ``jax.experimental.optimizers.l2_norm(g)``) -> the
  module's new path, or None."""
  q = qualify(node, imports)
  if q not in MODULE_RENAMES or not MODULE_RENAMES[q]:
    return None
  if dotted(node) != q:  # through an alias of a parent module: not here
    return None
  return expr(MODULE_RENAMES[q])


def rename_import(node):
  """``import jax.experimental.optimizers [as o]`` -> example_libraries."""
  changed = False
  names = []
  for a in node.names:
    full = dotted(a.name)
    if full in MODULE_RENAMES and MODULE_RENAMES[full] and (
        a.asname or MODULE_RENAMES[full].split('.')[0] == full.split('.')[0]):
      names.append(a.with_changes(name=expr(MODULE_RENAMES[full])))
      changed = True
    else:
      names.append(a)
  return node.with_changes(names=names) if changed else None
