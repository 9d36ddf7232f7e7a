"""Legacy JAX behaviour, restored in legacy processes (``_names.BEHAVIOURS``).

Each restoration is applied at activation, announced in the one legacy-mode
log line, and can be turned off with its environment variable
(``FLAXLEGACY_<NAME>=modern``).  Each one leaves alone every call that works
today with the same result, except ``iteration``, which changes what a
1-D array yields (see below); tracing is never affected (tracers have their
own methods, which are not touched).

* ``scalars``: ``int()``, ``float()`` and ``complex()`` of a one-element
  array of any rank convert it, as NumPy 1.x and legacy JAX did (today they
  raise ``TypeError: Only scalar arrays can be converted``).  ``bool()`` of
  a one-element array already works; ``operator.index()`` of one raised in
  legacy NumPy / JAX too and is left as it is.
* ``pmap``: an input committed to devices in a layout other than the one
  ``pmap`` shards it to (for example a key derived from ``state.step[0]`` of
  a replicated state, which is committed to the whole mesh, replicated) is
  moved to pmap's layout, as the old C++ pmap did, instead of raising
  ``Sharding passed to jit does not match the sharding on the respective
  arg``.  Only the arguments that raised are moved, only after the error.
* ``iteration``: iterating a 1-D ``jax.Array`` yields NumPy scalars, as
  legacy JAX did (``iter(x._value)`` until jax 0.2.22): they are hashable,
  so ``{...}[elem]`` works.  Rows of an n-D array stay ``jax.Array``s
  (legacy: NumPy arrays), so ``key, subkey = random.split(key)`` stays on
  the device.
* ``arguments``: ``jnp.clip(x, a_min=..., a_max=...)`` and
  ``x.clip(a_min=...)`` (keywords renamed to ``min`` / ``max``) and ``lax.dynamic_slice`` with slice sizes given as an
  array built from constants inside a traced function (a constant in
  legacy JAX, a tracer today) are accepted; so are ``jax.remat`` /
  ``jax.checkpoint`` with ``concrete=False`` (the old default; jax 0.10
  refuses the argument) and ``jnp.array(-1, dtype=jnp.uint32)`` (an
  out-of-range integer wraps around as NumPy 1.x cast it; NumPy 2 raises
  ``OverflowError``).  The wrappers call today's function unchanged unless
  it would raise on exactly these arguments.

The early-linen behaviours (``linen_keys``, ``initializers``,
``param_override``, ``carries``, ``attention``, ``early_stopping``,
``group_norm``) live in
``flaxlegacy/compat/early_linen.py`` and are applied when their flax module
is imported.

Everything here reaches into ``jax._src`` only through the few names below;
a JAX that moved them makes the restoration fail to apply (logged at debug
level, never an error), and tests/test_behaviour.py fails.
"""

import functools
import logging

logger = logging.getLogger('flaxlegacy')

_applied = {}


# --- scalars ----------------------------------------------------------------


def _array_impl():
  from jax._src.array import ArrayImpl  # pylint: disable=g-import-not-at-top
  return ArrayImpl


def _restore_scalars():
  cls = _array_impl()

  def make(method):
    modern = getattr(cls, method)

    @functools.wraps(modern)
    def convert(self):
      if self.ndim and self.size == 1:
        # NumPy 1.x semantics, without NumPy 2's DeprecationWarning.
        return getattr(self._value.reshape(()), method)()
      return modern(self)

    convert._flaxlegacy_modern = modern  # pylint: disable=protected-access
    return convert

  for method in ('__int__', '__float__', '__complex__'):
    setattr(cls, method, make(method))
  import numpy as np  # pylint: disable=g-import-not-at-top
  np.arange = _legacy_arange(np.arange)


def _one_element(x):
  """A one-element array of rank >= 1 as its 0-d array, else None."""
  ndim = getattr(x, 'ndim', None)
  if ndim and getattr(x, 'size', None) == 1 and hasattr(x, 'reshape'):
    return x.reshape(())
  return None


def _legacy_arange(modern):

  @functools.wraps(modern)
  def arange(*args, **kwargs):
    try:
      return modern(*args, **kwargs)
    except TypeError:
      scalars = [_one_element(a) for a in args]
      named = {k: _one_element(v) for k, v in kwargs.items()}
      if all(s is None for s in scalars) and all(
          s is None for s in named.values()):
        raise
    # NumPy 1.x converted one-element bounds, whatever their rank.
    args = [a if s is None else s for a, s in zip(args, scalars)]
    kwargs = {k: v if named[k] is None else named[k]
              for k, v in kwargs.items()}
    return modern(*args, **kwargs)

  arange._flaxlegacy_modern = modern  # pylint: disable=protected-access
  return arange


# --- iteration --------------------------------------------------------------


def _restore_iteration():
  cls = _array_impl()
  modern = cls.__iter__

  @functools.wraps(modern)
  def __iter__(self):  # pylint: disable=invalid-name
    if self.ndim == 1 and (self.is_fully_addressable or
                           self.is_fully_replicated):
      return iter(self._value)
    return modern(self)

  __iter__._flaxlegacy_modern = modern  # pylint: disable=protected-access
  cls.__iter__ = __iter__


# --- pmap -------------------------------------------------------------------

_MISMATCH = 'Sharding passed to jit does not match the sharding'


def _moved(args, shardings):
  """``args`` with each committed, differently laid out array moved."""
  import jax  # pylint: disable=g-import-not-at-top
  from jax._src import core  # pylint: disable=g-import-not-at-top
  out, moved = [], False
  for arg, sharding in zip(args, shardings):
    if (isinstance(arg, jax.Array) and not isinstance(arg, core.Tracer) and
        sharding is not None and arg.committed and
        not arg.sharding.is_equivalent_to(sharding, arg.ndim)):
      arg = jax.device_put(arg, sharding)
      moved = True
    out.append(arg)
  return out if moved else None


class _MovingJit:
  """A pmap's inner jit that moves mismatched inputs, as old pmap did."""

  def __init__(self, jitted, shardings):
    self._jitted = jitted
    self._shardings = shardings

  def _call(self, fn, args, kwargs):
    try:
      return fn(*args, **kwargs)
    except ValueError as e:
      if _MISMATCH not in str(e):
        raise
      moved = _moved(args, self._shardings)
      if moved is None:
        raise
      return fn(*moved, **kwargs)

  def __call__(self, *args, **kwargs):
    return self._call(self._jitted, args, kwargs)

  def trace(self, *args, **kwargs):
    # ``pmap(f).lower(...)``: the mismatch surfaces only when the trace is
    # lowered, so move first (tracing moves no data anyway).
    return self._jitted.trace(*(_moved(args, self._shardings) or args),
                              **kwargs)

  def __getattr__(self, name):
    return getattr(self._jitted, name)


def _restore_pmap():
  from jax._src import pmap as pmap_module  # pylint: disable=g-import-not-at-top
  modern = pmap_module._cached_shard_map  # pylint: disable=protected-access

  @functools.wraps(modern)
  def cached_shard_map(*args, **kwargs):
    cached = modern(*args, **kwargs)
    return cached._replace(jitted_f_with_shardings=_MovingJit(
        cached.jitted_f_with_shardings, tuple(cached.in_global_shardings)))

  cached_shard_map._flaxlegacy_modern = modern  # pylint: disable=protected-access
  pmap_module._cached_shard_map = cached_shard_map  # pylint: disable=protected-access


# --- arguments --------------------------------------------------------------

_LEGACY_CLIP_KEYWORDS = {'a': None, 'a_min': 'min', 'a_max': 'max'}


def _legacy_clip(modern):

  @functools.wraps(modern)
  def clip(*args, **kwargs):
    if not any(k in kwargs for k in _LEGACY_CLIP_KEYWORDS) and (
        'out' not in kwargs):
      return modern(*args, **kwargs)
    # Legacy signature: clip(a, a_min=None, a_max=None, out=None).
    if kwargs.pop('out', None) is not None:
      raise NotImplementedError(
          "The 'out' argument to jnp.clip is not supported.")
    if 'a' in kwargs:
      if args:
        raise TypeError("clip() got multiple values for argument 'a'")
      args = (kwargs.pop('a'),)
    for old, new in (('a_min', 'min'), ('a_max', 'max')):
      if old in kwargs:
        if new in kwargs:
          raise TypeError(f'clip() got both {old!r} and {new!r}')
        kwargs[new] = kwargs.pop(old)
    return modern(*args, **kwargs)

  clip._flaxlegacy_modern = modern  # pylint: disable=protected-access
  return clip


_MAX_CONSTANT_DEPTH = 32


def _constant_value(x, depth=0):
  """The value of a traced array computed from constants only, else None.

  In legacy JAX ``jnp.array((1, 1, df))`` inside ``jit`` was a constant;
  today it is a tracer whose producing equations have only literal or
  constant inputs.  Those equations are evaluated again, eagerly.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  from jax._src import core  # pylint: disable=g-import-not-at-top
  if not isinstance(x, core.Tracer):
    return x
  if depth > _MAX_CONSTANT_DEPTH or x.size > 64:
    return None
  get_const = getattr(x, 'get_const', None)
  const = get_const() if get_const is not None else None
  if const is not None:
    return const
  eqn = getattr(x, 'parent', None)
  if eqn is None or getattr(eqn, 'effects', None):
    return None
  ins = []
  for t in eqn.in_tracers:
    value = _constant_value(t, depth + 1)
    if value is None:
      return None
    ins.append(value)
  import jax  # pylint: disable=g-import-not-at-top
  with jax.ensure_compile_time_eval():
    outs = eqn.primitive.bind(*ins, **eqn.params)
  if not eqn.primitive.multiple_results:
    outs = [outs]
  for var, out in zip(eqn.outvars, outs):
    if var is x.val:
      return np.asarray(out)
  return None


def _legacy_dynamic_slice(modern):

  @functools.wraps(modern)
  def dynamic_slice(operand, start_indices, slice_sizes, *args, **kwargs):
    try:
      return modern(operand, start_indices, slice_sizes, *args, **kwargs)
    except TypeError:
      try:
        sizes = _constant_value(slice_sizes)
      except Exception:  # pylint: disable=broad-except
        sizes = None
      if sizes is None or sizes is slice_sizes:
        raise
    import numpy as np  # pylint: disable=g-import-not-at-top
    sizes = tuple(int(s) for s in np.asarray(sizes).reshape(-1))
    return modern(operand, start_indices, sizes, *args, **kwargs)

  dynamic_slice._flaxlegacy_modern = modern  # pylint: disable=protected-access
  return dynamic_slice


def _legacy_checkpoint(modern):

  @functools.wraps(modern)
  def checkpoint(*args, **kwargs):
    # ``concrete=False`` was the default; jax 0.10 refuses the argument.
    # ``concrete=True`` (Python control flow on values) stays refused.
    if kwargs.get('concrete', True) is False:
      del kwargs['concrete']
    return modern(*args, **kwargs)

  checkpoint._flaxlegacy_modern = modern  # pylint: disable=protected-access
  return checkpoint


def _wrapped_integers(value, dtype):
  """``value`` cast to integer ``dtype`` as NumPy 1.x did, or None."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  try:
    dtype = np.dtype(dtype)
    if not np.issubdtype(dtype, np.integer):
      return None
    values = np.asarray(value)
    if values.dtype == object or not np.issubdtype(values.dtype, np.integer):
      return None
    return values.astype(dtype)
  except (TypeError, ValueError, OverflowError):
    return None


def _legacy_array(modern):

  @functools.wraps(modern)
  def array(*args, **kwargs):
    try:
      return modern(*args, **kwargs)
    except OverflowError:
      # ``jnp.array(-1, dtype=jnp.uint32)``: NumPy 1.x (which legacy JAX
      # converted Python values with) wrapped an out-of-range integer
      # around, C-style (4294967295); NumPy 2 raises.
      dtype = args[1] if len(args) > 1 else kwargs.get('dtype')
      key = None if args else next(
          (k for k in ('object', 'a') if k in kwargs), None)
      value = args[0] if args else kwargs.get(key)
      wrapped = None if dtype is None else _wrapped_integers(value, dtype)
      if wrapped is None:
        raise
    if args:
      return modern(wrapped, *args[1:], **kwargs)
    return modern(**dict(kwargs, **{key: wrapped}))

  array._flaxlegacy_modern = modern  # pylint: disable=protected-access
  return array


def _restore_arguments():
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from jax import lax  # pylint: disable=g-import-not-at-top
  from jax._src import core  # pylint: disable=g-import-not-at-top
  jnp.clip = _legacy_clip(jnp.clip)
  lax.dynamic_slice = _legacy_dynamic_slice(lax.dynamic_slice)
  jax.checkpoint = _legacy_checkpoint(jax.checkpoint)
  jax.remat = _legacy_checkpoint(jax.remat)
  jnp.array = _legacy_array(jnp.array)
  jnp.asarray = _legacy_array(jnp.asarray)
  # The method too (``x.clip(a_min=0.)``): on concrete arrays, and on the
  # abstract value that tracers forward their methods to.
  cls = _array_impl()
  cls.clip = _legacy_clip(cls.clip)
  core.ShapedArray.clip = core.aval_method(
      _legacy_clip(core.ShapedArray.clip.fun))


def _early_linen(name):

  def restore():
    from flaxlegacy.compat import early_linen  # pylint: disable=g-import-not-at-top
    early_linen.restore(name)

  return restore


_RESTORE = {
    'scalars': _restore_scalars,
    'pmap': _restore_pmap,
    'iteration': _restore_iteration,
    'arguments': _restore_arguments,
    **{name: _early_linen(name) for name in (
        'linen_keys', 'initializers', 'param_override', 'carries',
        'attention', 'early_stopping', 'group_norm')},
}


def restore(name):
  """Applies one restoration (idempotent); False if JAX no longer allows it."""
  if name in _applied:
    return _applied[name]
  try:
    _RESTORE[name]()
    ok = True
  except Exception:  # pylint: disable=broad-except
    logger.debug('flaxlegacy: legacy %s behaviour not restored', name,
                 exc_info=True)
    ok = False
  _applied[name] = ok
  return ok


def modern(fn):
  """The modern function behind a restored one (for tests and tools)."""
  return getattr(fn, '_flaxlegacy_modern', fn)

