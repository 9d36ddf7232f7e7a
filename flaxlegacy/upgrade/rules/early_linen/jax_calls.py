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
* ``int(jax.random.randint(rng, [1], 0, 1000))``: ``int()`` / ``float()``
  / ``complex()`` of an array of one element but one or more dimensions.
  JAX of 2021 converted it (NumPy's size-1 rule); today's raises
  ``TypeError: Only scalar arrays can be converted to Python scalars``.
  Where the argument is a call known to make such an array -- a
  ``jax.random`` sampler or ``jnp.zeros`` / ``ones`` / ``empty`` / ``full``
  with a literal shape of ones (``[1]``, ``(1, 1)``, ``1``), or
  ``jnp.array`` / ``asarray`` of a one-element list literal -- the
  argument becomes ``X.item()`` (the same value; a 0-d array's ``item()``
  too).  Any other argument is left: nothing says it is such an array.
"""

import re

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


# jax.random samplers -> the position of their ``shape`` argument
_SAMPLERS = {f'jax.random.{k}': v for k, v in (
    ('randint', 1), ('uniform', 1), ('normal', 1), ('bits', 1),
    ('gumbel', 1), ('laplace', 1), ('logistic', 1), ('rademacher', 1),
    ('exponential', 1), ('cauchy', 1), ('bernoulli', 2), ('poisson', 2),
    ('gamma', 2), ('choice', 2), ('truncated_normal', 3), ('beta', 3),
    ('categorical', 3))}
_MAKERS = {f'jax.numpy.{k}': 0 for k in ('zeros', 'ones', 'empty', 'full')}
_SCALAR_CASTS = ('int', 'float', 'complex')
# ``int(`` / ``float(`` / ``complex(`` of a call (a cheap filter; the rule
# qualifies the callee)
_CAST_OF_CALL = re.compile(r'\b(?:int|float|complex)\(\s*[\w.]+\(')


def relevant(code, names):  # pylint: disable=unused-argument
  # concrete=, dynamic_slice, an integer dtype (_BITS: int8 ... uint64), or
  # a scalar cast of a call
  return ('concrete' in code or 'dynamic_slice' in code or
          any(f'int{b}' in code for b in (8, 16, 32, 64)) or
          bool(_CAST_OF_CALL.search(code)))


def _ones_shape(node):
  """Is ``node`` a literal shape of one element and one or more
  dimensions (``1``, ``[1]``, ``(1, 1)``)?"""
  if _int_value(node) == 1:
    return True
  if isinstance(node, (cst.List, cst.Tuple)) and node.elements:
    return all(not isinstance(el, cst.StarredElement)
               and _int_value(el.value) == 1 for el in node.elements)
  return False


def _one_element_list(node):
  """A list literal holding one element (nested: ``[[x]]``)."""
  if not isinstance(node, cst.List) or len(node.elements) != 1 or (
      isinstance(node.elements[0], cst.StarredElement)):
    return False
  inner = node.elements[0].value
  return not isinstance(inner, (cst.List, cst.Tuple)) or _one_element_list(
      inner)


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

  def _one_element_array(self, node):
    """Is ``node`` a call known to make an array of one element and one or
    more dimensions?"""
    if not isinstance(node, cst.Call):
      return False
    q = self.names.qualify(node.func)
    position = _SAMPLERS.get(q, _MAKERS.get(q))
    if position is not None:
      for i, a in enumerate(node.args):
        if a.star:
          return False
        if (a.keyword is None and i == position) or (
            a.keyword is not None and a.keyword.value == 'shape'):
          return _ones_shape(a.value)
      return False
    if q in _ARRAYS and node.args and node.args[0].keyword is None and (
        not node.args[0].star):
      return _one_element_list(node.args[0].value)
    return False

  def _scalar_cast(self, original_node, updated_node):
    """``int(jax.random.randint(k, [1], 0, n))`` -> ``int(....item())``."""
    if (len(updated_node.args) != 1 or updated_node.args[0].keyword
        or updated_node.args[0].star
        or not self._one_element_array(original_node.args[0].value)):
      return updated_node
    arg = updated_node.args[0]
    self.rewrote(original_node, f'{original_node.func.value}() of an array of '
                 'one element -> of its item() (today\'s JAX converts only '
                 '0-d arrays)')
    return updated_node.with_changes(args=[arg.with_changes(
        value=cst.Call(func=cst.Attribute(value=arg.value,
                                          attr=cst.Name('item'))))])

  def leave_Call(self, original_node, updated_node):
    if isinstance(original_node.func, cst.Name) and (
        original_node.func.value in _SCALAR_CASTS) and (
            original_node.func.value not in self.names.imports):
      return self._scalar_cast(original_node, updated_node)
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
