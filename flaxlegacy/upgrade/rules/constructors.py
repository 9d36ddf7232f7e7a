"""How a resolved module reference is constructed (shared by the
``.partial`` rules, rules/partials.py, and a module body's calls,
rules/apply/): its constructor expression, legacy layer keywords renamed to
linen's, the keywords linen needs for the legacy numbers, and the layer or
class at the bottom of a chain of partials.  Of the rules it imports only
``subclasses`` (a user's subclass of a legacy layer)."""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import layer_table
from flaxlegacy.upgrade.rules import subclasses


def partial_root(ref):
  """The layer / class Ref at the bottom of a chain of partials."""
  while ref.kind == 'partial':
    ref = ref.target
  return ref


def ctor_expr(up, ref, updated_func):
  """The constructor expression: ``nn.Dense``, ``Block``, a variable ..."""
  if ref.kind == 'layer':
    if ref.target.linen in layer_table.SHIPPED:
      # a flaxlegacy linen layer (layer_table.py SHIPPED)
      full = layer_table.SHIPPED[ref.target.linen]
      up.ctx.needed_imports.add(full.rsplit('.', 1)[0])
      up.ctx.report.rewritten.append({
          'rule': 'layer', 'line': up.ctx.line(updated_func),
          'what': f'nn.{ref.target.legacy} -> {ref.target.linen}',
          'shipped': full})
      return cst_util.expr(ref.target.linen)
    if subclasses.is_user_layer(ref.target):
      return updated_func  # the user's subclass of a layer (StdConv)
    return updated_func if isinstance(updated_func, cst.Attribute) else cst_util.expr(
        up._prefix() + '.' + ref.target.linen)  # pylint: disable=protected-access
  return updated_func


def renamed_kwargs(layer, value):
  """``**kwargs`` forwarded to a legacy layer, with legacy keys (``bias``)
  renamed to linen's (``use_bias``) when the call runs."""
  renames = {k: v for k, v in layer.renames.items() if k in layer.params}
  if not renames:
    return value
  table = '{' + ', '.join(f'{k!r}: {v!r}' for k, v in renames.items()) + '}'
  src = cst.Module([]).code_for_node(value)
  if not isinstance(value, (cst.Name, cst.Attribute)):
    src = f'({src})'
  return cst_util.expr(f'{{{table}.get(k, k): v for k, v in {src}.items()}}')


def layer_kwarg(a, layer):
  k = cst_util.kw(a)
  if k is None or k == 'name':
    return a
  return a.with_changes(keyword=cst.Name(layer_table.linen_kwarg(layer, k)))


def add_layer_defaults(layer, args):
  have = {cst_util.kw(a) for a in args}
  out = list(args)
  for k, v in layer.add_kwargs.items():
    if k not in have:
      out.append(cst_util.arg(cst_util.expr(v), k))
  return out
