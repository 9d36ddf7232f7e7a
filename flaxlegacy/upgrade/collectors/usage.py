"""Which parameters a legacy module uses as arrays (its field / call split).

``UsageVisitor`` walks an ``apply`` (or method) body; legacy attention and
recurrent calls count through ``attention_array_params`` /
``cell_array_params`` (their tables live here, rules/attention.py and
rules/recurrent.py read them).
"""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import walk


ARRAY_ATTRS = frozenset(('shape', 'ndim', 'dtype', 'reshape', 'astype', 'T',
                         'size', 'sum', 'mean', 'transpose', 'squeeze'))


WEAK_ARRAY_ATTRS = frozenset(('size',))


NOT_ARRAY_CALLS = frozenset((
    'len', 'range', 'int', 'float', 'tuple', 'list', 'isinstance', 'print',
    'str', 'dict', 'enumerate', 'zip', 'max', 'min', 'sum', 'getattr',
    'hasattr', 'bool', 'repr', 'sorted', 'type', 'set', 'any', 'all', 'abs',
    'functools.partial'))


TREE_FNS = frozenset(('tree_map', 'tree_multimap', 'tree_leaves',
                      'tree_flatten', 'tree_reduce', 'tree_structure',
                      'tree_transpose'))


# the legacy module life cycle, called on a module class held by a parameter
DRIVE_METHODS = frozenset(('init', 'call', 'init_by_shape', 'create',
                           'create_by_shape'))


class UsageVisitor(walk.FastVisitor):
  """Which parameters are used as arrays."""

  def __init__(self, params):
    self.params = params
    self.array = set()
    self.weak = set()  # only ``p.size``: an array, or a config's field
    self.child_calls = []
    self.driven = set()

  def visit_Attribute(self, node):
    if (isinstance(node.value, cst.Name) and node.value.value in self.params
        and node.attr.value in ARRAY_ATTRS):
      if node.attr.value in WEAK_ARRAY_ATTRS:
        self.weak.add(node.value.value)
      else:
        self.array.add(node.value.value)

  def visit_Subscript(self, node):
    if isinstance(node.value, cst.Name) and node.value.value in self.params:
      self.array.add(node.value.value)

  def visit_Call(self, node):
    name = cst_util.dotted(node.func)
    f = node.func
    if (isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name)
        and f.value.value in self.params and f.attr.value in DRIVE_METHODS):
      self.driven.add(f.value.value)
    self.array.update(cell_array_params(node, self.params))
    if isinstance(node.func, cst.Name):
      pos, kw = [], {}
      for a in node.args:
        v = a.value
        p = v.value if isinstance(v, cst.Name) and v.value in self.params \
            else None
        if a.star:
          continue
        if a.keyword is None:
          pos.append(p)
        elif p is not None:
          kw[a.keyword.value] = p
      if any(pos) or kw:
        self.child_calls.append((node.func.value, pos, kw))
    if name in NOT_ARRAY_CALLS:
      return
    if name and name.startswith('jax.') and name.split('.')[-1] in TREE_FNS:
      # a pytree of arrays (a mask of the parameters): an input; linen
      # would also freeze a dict field, unlike the parameters it is mapped
      # against
      for a in node.args:
        if isinstance(a.value, cst.Name) and a.value.value in self.params:
          self.array.add(a.value.value)
    self.array |= attention_array_params(node.func, node.args, self.params)
    if isinstance(node.func, cst.Attribute) and node.func.attr.value in (
        'partial', 'shared'):
      return
    if node.args and node.args[0].keyword is None and not node.args[0].star:
      v = node.args[0].value
      if isinstance(v, cst.Name) and v.value in self.params:
        self.array.add(v.value)


# legacy spellings (after the nn prefix) of the attention modules
ATTENTION = {
    'SelfAttention': 'SelfAttention',
    'MultiHeadDotProductAttention': 'MultiHeadDotProductAttention',
    'attention.SelfAttention': 'SelfAttention',
    'attention.MultiHeadDotProductAttention': 'MultiHeadDotProductAttention',
}


# Arguments that carry arrays (facts.py: the enclosing module's parameter
# passed here is a __call__ parameter, not a field).
ARRAY_KWARGS = ('inputs_kv', 'padding_mask', 'key_padding_mask',
                'segmentation', 'key_segmentation', 'dropout_rng')


def attention_array_params(func, args, params):
  """Parameters of ``params`` that a legacy attention call uses as arrays.

  ``func``: the callee (``nn.SelfAttention``), ``args``: its libcst args.
  """
  name = cst_util.dotted(func) if isinstance(
      func, (cst.Attribute, cst.Name)) else None
  if not name or not any(name.endswith('.' + a) for a in ATTENTION):
    return set()
  out = set()
  positional = 0
  for a in args:
    v = a.value
    p = v.value if isinstance(v, cst.Name) and v.value in params else None
    if a.keyword is None and not a.star:
      # inputs_q, and MultiHeadDotProductAttention's inputs_kv
      if p and (positional == 0 or positional == 1 and name.endswith(
          'MultiHeadDotProductAttention')):
        out.add(p)
      positional += 1
    elif a.keyword is not None and a.keyword.value in ARRAY_KWARGS and p:
      out.add(p)
  return out


CELLS = ('LSTMCell', 'GRUCell', 'OptimizedLSTMCell')


def cell_array_params(call, params):
  """Parameters passed as arrays to a scan or a legacy cell (facts split).

  ``scan_in_dim(f, init, xs)`` / ``lax.scan(f, init, xs)``: ``init`` and
  ``xs``; ``nn.LSTMCell(carry, x, ...)``: ``carry`` and ``x``.
  """
  name = cst_util.dotted(call.func) or ''
  if name.endswith(('scan_in_dim', 'lax.scan')):
    args = [a for a in call.args[1:3] if a.keyword is None] + [
        a for a in call.args if a.keyword is not None
        and a.keyword.value in ('init', 'xs')]
  elif name.split('.')[-1] in CELLS:
    args = [a for a in call.args[:2] if a.keyword is None]
  else:
    return []
  return [a.value.value for a in args if isinstance(a.value, cst.Name)
          and a.value.value in params and not a.star]
