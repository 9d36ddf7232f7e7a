"""Rule: JAX call forms of 2021 that today's JAX refuses.

* ``jax.remat(f, concrete=False)`` / ``jax.checkpoint(...)`` (also
  ``functools.partial(jax.remat, concrete=...)``): ``concrete=False`` was
  the default until jax 0.8.2, and since 0.10.0 any ``concrete`` raises
  ``NotImplementedError``.  A literal ``False`` is dropped; ``True`` (which
  has no equivalent today: ``static_argnums``) stays with a TODO; a name
  or attribute is passed on only when true (``**({'concrete': c} if c
  else {})``: the same call for ``False``, today's error for ``True``),
  with a TODO.  linen's ``nn.remat`` / ``nn.checkpoint``: its default
  ``concrete=False`` is dropped too, ``concrete=True`` gets the TODO (a
  name stays: linen refuses only a true value, with its own error).
* ``jnp.array(-1, dtype=jnp.uint32)`` / ``jnp.asarray`` / ``jnp.uint32(-1)``:
  NumPy 1.x cast an out-of-range Python integer C-style (4294967295), which
  code relied on (flaxformer's decode index); NumPy 2 raises
  ``OverflowError``.  An integer literal (or a list / tuple of them) out of
  the range of a named 8- to 32-bit integer dtype becomes the value it was
  cast to; of a 64-bit one, a TODO (what it became depended on
  ``jax_enable_x64``).
* ``lax.dynamic_slice(x, start, jnp.array((1, 1, d)))``: slice sizes as an
  array built from a literal tuple / list; JAX of 2020 read its values,
  today's wants the sizes static (inside ``jit`` the array is a tracer:
  ``TypeError: Shapes must be 1D sequences of concrete values``).  The
  literal itself is passed (what legacy read: the sizes had to be known
  when the call was traced then too).
"""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade.rules.early_linen import _common

_REMAT = ('jax.remat', 'jax.checkpoint', 'jax.ad_checkpoint.checkpoint',
          'jax.ad_checkpoint.remat')
_LINEN_REMAT = ('flax.linen.remat', 'flax.linen.checkpoint',
                'flax.linen.transforms.remat', 'flax.linen.transforms.checkpoint')
_ARRAYS = ('jax.numpy.array', 'jax.numpy.asarray')
_SLICES = ('jax.lax.dynamic_slice',)
_SIZE_ARRAYS = _ARRAYS + ('numpy.array', 'numpy.asarray')
_BITS = {f'{s}int{b}': (b, s == '') for s in ('', 'u') for b in (8, 16, 32, 64)}
_DTYPE_OWNERS = ('jax.numpy', 'numpy')

CONCRETE_TRUE = ('concrete=True: jax.checkpoint no longer has it (removed '
                 'in jax 0.10.0); mark the arguments Python control flow '
                 'depends on with static_argnums')
CONCRETE_VALUE = ('concrete=<value>: jax.checkpoint no longer has it (removed '
                  'in jax 0.10.0); the upgrade passes it on only when true, '
                  'where today\'s JAX refuses it: use static_argnums there')


WIDE = ('an integer literal out of its 64-bit dtype\'s range: NumPy 1.x cast '
        'it C-style, then JAX to 32 bits unless jax_enable_x64; NumPy 2 raises '
        'OverflowError; write the value it should have')


def relevant(code, names):  # pylint: disable=unused-argument
  # concrete=, dynamic_slice, or an integer dtype (_BITS: int8 ... uint64)
  return ('concrete' in code or 'dynamic_slice' in code or
          any(f'int{b}' in code for b in (8, 16, 32, 64)))


def _int_value(node):
  """The value of an integer literal (``-1`` too), or None."""
  sign = 1
  if isinstance(node, cst.UnaryOperation) and isinstance(
      node.operator, (cst.Minus, cst.Plus)):
    sign = -1 if isinstance(node.operator, cst.Minus) else 1
    node = node.expression
  if isinstance(node, cst.Integer):
    return sign * int(node.evaluated_value)
  return None


def _wrapped(value, bits, signed):
  v = value % (1 << bits)
  if signed and v >= 1 << (bits - 1):
    v -= 1 << bits
  return v


def _in_range(value, bits, signed):
  if signed:
    return -(1 << (bits - 1)) <= value < (1 << (bits - 1))
  return 0 <= value < (1 << bits)


def _literal(value):
  return (cst.UnaryOperation(operator=cst.Minus(),
                             expression=cst.Integer(str(-value)))
          if value < 0 else cst.Integer(str(value)))


class Rule(_common.Rule):
  NAME = 'early_linen_jax_calls'

  def _dtype(self, node):
    """(bits, signed) of ``jnp.uint32`` / ``np.int8`` / ``'uint32'``."""
    if isinstance(node, cst.SimpleString):
      return _BITS.get(node.evaluated_value)
    q = self.names.qualify(node)
    if not q:
      return None
    owner, _, name = q.rpartition('.')
    return _BITS.get(name) if owner in _DTYPE_OWNERS else None

  def _wrap(self, value_node, dtype, node):
    """``value_node`` with out-of-range integer literals cast, or None."""
    bits, signed = dtype
    if isinstance(value_node, (cst.List, cst.Tuple)):
      elements, changed = [], False
      for el in value_node.elements:
        if isinstance(el, cst.StarredElement):
          return None
        new = self._wrap(el.value, dtype, None)
        changed = changed or new is not None
        elements.append(el.with_changes(value=new) if new is not None else el)
      if not changed:
        return None
      out = value_node.with_changes(elements=elements)
    else:
      value = _int_value(value_node)
      if value is None or _in_range(value, bits, signed):
        return None
      if bits == 64:  # its cast depends on jax_enable_x64 (32 bits if off)
        self.todo(node if node is not None else value_node, WIDE)
        return None
      out = _literal(_wrapped(value, bits, signed)).with_changes(
          lpar=value_node.lpar, rpar=value_node.rpar)
    if node is not None:
      self.rewrote(node, 'an integer literal out of its dtype\'s range -> '
                   'the value NumPy 1.x cast it to')
    return out

  def _concrete(self, original_node, updated_node, linen):
    args = list(updated_node.args)
    for i, a in enumerate(args):
      if a.keyword is None or a.keyword.value != 'concrete':
        continue
      v = a.value
      if isinstance(v, cst.Name) and v.value == 'False':
        self.rewrote(original_node, 'concrete=False dropped (the default; '
                     'today\'s jax.checkpoint refuses the keyword)')
        del args[i]
        return updated_node.with_changes(args=_common.clean_args(args))
      if isinstance(v, cst.Name) and v.value == 'True':
        self.todo(original_node, CONCRETE_TRUE)
        return updated_node
      if linen or not isinstance(v, (cst.Name, cst.Attribute)):
        return updated_node  # (linen takes False; an expression: its error)
      src = cst_util.dotted(v)
      self.rewrote(original_node, 'concrete=c -> passed only when true')
      self.todo(original_node, CONCRETE_VALUE)
      args[i] = cst.Arg(value=_common.e(
          f"({{'concrete': {src}}} if {src} else {{}})"), star='**')
      return updated_node.with_changes(args=_common.clean_args(args))
    return updated_node

  def _slice_sizes(self, original_node, updated_node):
    """``slice_sizes=jnp.array((a, b))`` -> ``(a, b)``."""
    args = list(updated_node.args)
    for i, a in enumerate(args):
      if a.star or not ((a.keyword is None and i == 2) or (
          a.keyword is not None and a.keyword.value == 'slice_sizes')):
        continue
      v = a.value
      if not (isinstance(v, cst.Call) and len(v.args) == 1
              and v.args[0].keyword is None and not v.args[0].star
              and isinstance(v.args[0].value, (cst.Tuple, cst.List))
              and self.names.qualify(v.func) in _SIZE_ARRAYS):
        return updated_node
      sizes = v.args[0].value
      if any(isinstance(el, cst.StarredElement) for el in sizes.elements):
        return updated_node
      sizes = cst.Tuple(elements=[
          el.with_changes(comma=cst.MaybeSentinel.DEFAULT)
          if j == len(sizes.elements) - 1 and len(sizes.elements) > 1 else el
          for j, el in enumerate(sizes.elements)])
      if len(sizes.elements) == 1:
        sizes = sizes.with_changes(elements=[sizes.elements[0].with_changes(
            comma=cst.Comma())])
      args[i] = a.with_changes(value=sizes)
      self.rewrote(original_node, 'lax.dynamic_slice slice sizes as an array '
                   '-> the tuple (today\'s JAX wants them static)')
      return updated_node.with_changes(args=args)
    return updated_node

  def leave_Call(self, original_node, updated_node):
    q = self.names.qualify(original_node.func)
    target = q
    if q == 'functools.partial' and original_node.args and (
        original_node.args[0].keyword is None):
      target = self.names.qualify(original_node.args[0].value)
    if target in _REMAT or target in _LINEN_REMAT:
      return self._concrete(original_node, updated_node,
                            target in _LINEN_REMAT)
    if q in _SLICES:
      return self._slice_sizes(original_node, updated_node)
    if q in _ARRAYS and updated_node.args:
      dtype = None
      for i, a in enumerate(updated_node.args):
        if (a.keyword is not None and a.keyword.value == 'dtype') or (
            a.keyword is None and i == 1):
          dtype = self._dtype(a.value)
      first = updated_node.args[0]
      if dtype is None or first.keyword is not None or first.star:
        return updated_node
      new = self._wrap(first.value, dtype, original_node)
      if new is None:
        return updated_node
      return updated_node.with_changes(
          args=[first.with_changes(value=new)] + list(updated_node.args[1:]))
    if q and len(updated_node.args) == 1 and not updated_node.args[0].keyword:
      dtype = self._dtype(original_node.func)
      if dtype is not None:  # jnp.uint32(-1)
        new = self._wrap(updated_node.args[0].value, dtype, original_node)
        if new is not None:
          return updated_node.with_changes(
              args=[updated_node.args[0].with_changes(value=new)])
    return updated_node
