"""Rule: removed JAX, NumPy and Python names -> their modern spelling.

Reads flaxlegacy/_names.py (``JAX_ALIASES``, the ``jax.*`` entries of
``MODULES``, and the removed NumPy / ``jax.numpy`` / ``collections`` /
``inspect`` names of ``NUMPY_ALIASES``, ``JAX_REMOVED_API`` and
``PYTHON_ALIASES``), the same table the layer serves and ``flaxlegacy
check`` scans for, so they cannot disagree: every name the layer serves is
rewritten here or left with a TODO, never left silently.  Table values of
the form ``'module:attr'`` are plain renames; ``'@name'`` values are small
functions in flaxlegacy/_activate.py, rewritten here call by call
(``CALLS``); the layer's own implementations of removed NumPy functions
(flaxlegacy/compat/numpy_names.py) have today's spelling in ``_TODAY``.
Keyword arguments JAX renamed (``jnp.clip(a_min=, a_max=)``) are
``KEYWORD_RENAMES``.
"""

import re

import libcst as cst

from flaxlegacy import _names
from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade.cst_util import dotted

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
for _legacy, _today in _names.UPGRADE_MODULES.items():
  if _today:
    MODULE_RENAMES[_legacy] = _today
  else:
    del MODULE_RENAMES[_legacy]
    UNSURE[_legacy] = (f'{_legacy} was removed from JAX; today: '
                       f'{_names.MODULES_BY_LEGACY[_legacy].modern}')

# Removed modules (``from jax.lib import xla_client``): their imports get
# their TODO from rules/early_linen/removed_modules.py.
REMOVED_MODULES = frozenset(_names.MODULES_BY_LEGACY)

# The layer's implementations of removed NumPy / jax.numpy names
# (flaxlegacy/compat/numpy_names.py) -> today's name with the same
# arguments and the same numbers; or a constant's value (an expression:
# ``{np}`` is the file's spelling of numpy).  Implementations absent here
# differ from any single name today in some argument or corner case
# (np.issubclass_ is False on a TypeError, np.asfarray keeps only inexact
# dtypes ...): calls of a few are rewritten (``_CALL_FORMS``), the rest get
# a TODO with today's spelling.
_TODAY = {
    'product': 'numpy.prod', 'cumproduct': 'numpy.cumprod',
    'sometrue': 'numpy.any', 'alltrue': 'numpy.all',
    'round_': 'numpy.round', 'trapz': 'numpy.trapezoid',
    'mat': 'numpy.asmatrix', 'safe_eval': 'ast.literal_eval',
    'NINF': '-numpy.inf', 'NZERO': '-0.0', 'PZERO': '0.0',
    'jnp_product': 'jax.numpy.prod', 'jnp_cumproduct': 'jax.numpy.cumprod',
    'jnp_sometrue': 'jax.numpy.any', 'jnp_alltrue': 'jax.numpy.all',
    'jnp_round_': 'jax.numpy.round', 'jnp_trapz': 'jax.numpy.trapezoid',
    'jnp_row_stack': 'jax.numpy.vstack', 'jnp_NINF': '-jax.numpy.inf',
    'jnp_NZERO': '-0.0', 'jnp_PZERO': '0.0',
}
# qualified legacy name -> today's expression (a dotted name, a builtin
# ``builtins.X``, or a constant), for the names above.
NAME_RENAMES = {}
_REMOVED_ROOTS = ('numpy', 'jax.numpy', 'collections', 'inspect')
for _a in (_names.NUMPY_ALIASES + _names.PYTHON_ALIASES
           + _names.JAX_REMOVED_API):
  _q = f'{_a.owner}.{_a.name}'
  if _a.owner == 'jax.test_util':
    continue  # rules/test_util.py
  if _q in MODULE_RENAMES:
    continue  # a module with a new path (above)
  if _a.owner not in _REMOVED_ROOTS:
    # removed JAX functions and modules used beside Flax (xla_bridge,
    # device_put_replicated, custom_transforms ...): no one rewrite
    UNSURE.setdefault(_q, f'{_q} was removed ({_a.removed}); today: '
                      f'{_a.modern}')
    continue
  _mod, _, _attr = _a.value.partition(':')
  if _mod.startswith('flaxlegacy.'):
    if _attr in _TODAY:
      NAME_RENAMES[_q] = _TODAY[_attr]
      if _a.owner == 'jax.numpy' and _TODAY[_attr].startswith('-numpy.'):
        NAME_RENAMES[_q] = '-jax.numpy.' + _TODAY[_attr][len('-numpy.'):]
    else:
      UNSURE[_q] = (f'{_q} was removed ({_a.removed}) and no one name today '
                    f'behaves the same for every call; today: {_a.modern}')
  elif _attr:
    NAME_RENAMES[_q] = f'{_mod}.{_attr}'
  else:
    NAME_RENAMES[_q] = _mod  # a module: np.warnings -> warnings
# Calls of removed functions with a certain rewrite when called this way:
# qualified name -> (positional count, allowed keywords, template over the
# argument sources ``{0}``, ``{1}``, ``{np}``).
_CALL_FORMS = {
    'numpy.msort': (1, (), '{np}.sort({0}, axis=0)'),
    'jax.numpy.msort': (1, (), '{jnp}.sort({0}, axis=0)'),
    'numpy.asscalar': (1, (), '({0}).item()'),
}
for _q in _CALL_FORMS:
  UNSURE.setdefault(_q, f'{_q} was removed; this call form has no certain '
                    'rewrite')
# (function, {legacy keyword: today's keyword}, positional-only parameters
# today): keyword arguments JAX renamed; the layer accepts the old ones.
KEYWORD_RENAMES = {
    'jax.numpy.clip': ({'a_min': 'min', 'a_max': 'max'}, ('a',)),
}
# Last names of the removed NumPy / Python names (``np.float``,
# ``collections.Mapping``), for the statement filter of transform.py and
# the file filter of api.py: they are found as attributes (``.float``) or
# in an import statement (``from collections import Mapping``); several
# are common words.
_ATTR_WORDS = sorted({q.rsplit('.', 1)[-1] for q in list(NAME_RENAMES) + [
    q for q in UNSURE if q.split('.')[0] in ('numpy', 'collections',
                                             'inspect')]
                      + list(KEYWORD_RENAMES) + list(_CALL_FORMS)})
_WORDS_ALT = '(?:' + '|'.join(map(re.escape, _ATTR_WORDS)) + ')'
REMOVED_NAME_RE = re.compile(r'\.' + _WORDS_ALT + r'\b')
_REMOVED_OWNERS = ('numpy', 'jax.numpy', 'collections', 'inspect')


def removed_name_pattern(imports):
  """A regex source matching ``np.float`` / ``collections.Mapping`` ... in
  a file with these ``imports`` (local -> full), or None when the file
  imports none of their modules: the statement filter of transform.py."""
  roots = sorted(local for local, full in imports.items()
                 if full in _REMOVED_OWNERS or full == 'jax')
  if not roots:
    return None
  return (r'\b(?:' + '|'.join(map(re.escape, roots)) + r')(?:\.numpy)?\.'
          + _WORDS_ALT + r'\b')


def qualify(node, imports):
  """The fully qualified dotted name of ``node`` through the file's imports."""
  return qualify_name(dotted(node), imports)


def qualify_name(name, imports):
  """``qualify`` of a dotted name (``'np.float'``), or None."""
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
  return cst_util.expr(src)


def _module_of(target):
  """The module to import for a dotted ``target`` (``ast`` for
  ``ast.literal_eval``, ``collections.abc`` for ``collections.abc.X``,
  ``warnings`` for the module ``warnings``)."""
  if target in ('warnings', 'math'):
    return target
  return target.rpartition('.')[0]


def today(target, imports):
  """(source, module to import or None) of a ``NAME_RENAMES`` target,
  spelled with the file's imports."""
  if target.startswith('builtins.'):
    return target[len('builtins.'):], None
  neg = target.startswith('-')
  name = target.lstrip('-')
  if not name[:1].isalpha():  # a constant: -0.0, 0.0
    return target, None
  mod = _module_of(name)
  src = spell(name, imports)
  need = None
  if src == name:
    need = mod  # not through an import of the file
  elif mod == 'collections.abc' and 'collections.abc' not in imports.values():
    need = mod  # spelled through ``import collections``: import the
    # submodule too, which nothing else is sure to have imported
  return ('(-%s)' % src if neg else src), need


def rewrite_keywords(node, q, code_of):
  """A call of ``KEYWORD_RENAMES[q]`` with today's keywords, or None when
  it uses none of the old ones.  A positional-only parameter given by
  keyword moves to its place when the positions before it are given."""
  renames, positional_only = KEYWORD_RENAMES[q]
  args = list(node.args)
  if not any(a.keyword is not None and (a.keyword.value in renames
                                        or a.keyword.value in positional_only)
             for a in args):
    return None
  if any(a.star for a in args):
    return False
  pos = [a for a in args if a.keyword is None]
  kws = [a for a in args if a.keyword is not None]
  out_pos = list(pos)
  out_kw = []
  for a in kws:
    k = a.keyword.value
    if k in positional_only:
      if positional_only.index(k) != len(out_pos):
        return False
      out_pos.append(a.with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT))
    elif k in renames:
      if any(b.keyword is not None and b.keyword.value == renames[k]
             for b in kws):
        return False
      out_kw.append(a.with_changes(keyword=cst.Name(renames[k])))
    else:
      out_kw.append(a)
  new = out_pos + out_kw
  new = [a.with_changes(comma=cst.MaybeSentinel.DEFAULT) if i == len(new) - 1
         else a.with_changes(comma=cst.Comma(
             whitespace_after=cst.SimpleWhitespace(' ')))
         for i, a in enumerate(new)]
  return node.with_changes(args=new)


def rewrite_call_form(node, q, imports, code_of):
  """``_CALL_FORMS[q]`` for this call, or None when its form differs."""
  npos, kws, template = _CALL_FORMS[q]
  args = node.args
  if any(a.star for a in args) or any(
      a.keyword is not None and a.keyword.value not in kws for a in args):
    return None
  pos = [a for a in args if a.keyword is None]
  if len(pos) != npos:
    return None
  return expr(template.format(
      *[code_of(a.value) for a in pos],
      np=spell('numpy', imports), jnp=spell('jax.numpy', imports)))


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


def rename_import_from(node, served=None):
  """``from jax.config import config`` -> ``from jax import config`` etc.

  ``served``: {removed module: what it becomes in this file}
  (rules/early_linen/removed_modules.py ``served_renames``)."""
  renames = {**MODULE_RENAMES, **served} if served else MODULE_RENAMES
  if node.relative or node.module is None:
    return None
  mod = dotted(node.module)
  if isinstance(node.names, cst.ImportStar):
    return None
  if mod == 'jax.config' and all(
      dotted(a.name) == 'config' for a in node.names):
    return node.with_changes(module=cst.Name('jax'))
  if mod in renames and renames[mod]:
    return node.with_changes(module=expr(renames[mod]))
  # from jax.experimental import optimizers[, stax] -> from
  # jax.example_libraries import ...; names that stay keep their module
  moved, kept = {}, []
  for a in node.names:
    full = f'{mod}.{dotted(a.name)}'
    target = renames.get(full) or _importable(NAME_RENAMES.get(full))
    if target:
      new_mod, _, new_name = target.rpartition('.')
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


def _importable(target):
  """``target`` when it is a name ``from M import N`` can import."""
  if (target and '.' in target and target[:1].isalpha()
      and not target.startswith('builtins.')):
    return target
  return None


def unmovable_imports(node):
  """Removed names a ``from M import ...`` imports that no import today
  provides (``from numpy import float``, a constant): for a TODO."""
  if node.relative or node.module is None or isinstance(
      node.names, cst.ImportStar):
    return []
  mod = dotted(node.module)
  return [f'{mod}.{dotted(a.name)}' for a in node.names
          if f'{mod}.{dotted(a.name)}' in NAME_RENAMES and not _importable(
              NAME_RENAMES[f'{mod}.{dotted(a.name)}'])]


def _commas(names):
  names = list(names)
  return [a.with_changes(comma=cst.MaybeSentinel.DEFAULT) if i == len(
      names) - 1 else a.with_changes(comma=cst.Comma(
          whitespace_after=cst.SimpleWhitespace(' ')))
          for i, a in enumerate(names)]


def rename_module_attribute(node, imports, served=None):
  """``jax.experimental.optimizers`` spelled out from ``jax`` (an
  attribute chain, ``jax.experimental.optimizers.l2_norm(g)``) -> the
  module's new path (``served`` as for ``rename_import_from``), or None."""
  renames = {**MODULE_RENAMES, **served} if served else MODULE_RENAMES
  q = qualify(node, imports)
  if q not in renames or not renames[q]:
    return None
  if dotted(node) != q:  # through an alias of a parent module: not here
    return None
  return expr(renames[q])


def rename_import(node, served=None):
  """``import jax.experimental.optimizers [as o]`` -> example_libraries."""
  renames = {**MODULE_RENAMES, **served} if served else MODULE_RENAMES
  changed = False
  names = []
  for a in node.names:
    full = dotted(a.name)
    if full in renames and renames[full] and (
        a.asname or renames[full].split('.')[0] == full.split('.')[0]):
      names.append(a.with_changes(name=expr(renames[full])))
      changed = True
    else:
      names.append(a)
  return node.with_changes(names=names) if changed else None
