"""Flax 0.3.x linen behaviour, restored in legacy processes.

Code of 2021 that mixed ``flax.nn`` / ``flax.optim`` with linen was written
for flax 0.3.x linen.  Today's linen changed under it; each restoration
below is one row of ``_names.BEHAVIOURS`` (announced in the legacy-mode log
line, off with ``FLAXLEGACY_<NAME>=modern``) and, except ``linen_keys`` and
an initializer's stated dtype (``initializers``), changes only calls that
raise today:

* ``linen_keys``: parameter and RNG keys derived as flax 0.3.x did: each
  scope name folded into the key by its SHA-1 hash, one fold per level, and
  ``make_rng``'s counter folded in directly, counting per child scope
  object as 0.3 did.  Since flax 0.4.0 the whole
  path and the counter are hashed into one fold (``LazyRng``), so the same
  seed initialises other numbers.  Restored by deriving every ``LazyRng``
  eagerly, as flax's own ``flax_lazy_rng=False`` mode did until it was
  removed (a numbers change: docs/decisions.md).
* ``initializers``: today's layers call ``init(key, shape, param_dtype)``;
  flax 0.3's called ``init(key, shape)``.  When an initializer cannot take
  the dtype (``def cplx_init(rng, shape)``) or a ``functools.partial``
  already binds ``dtype=``, it is called without it.  So is one that states
  a dtype of its own (``lecun_normal(dtype=jnp.float64)``; jax's defaults
  are None) other than the ``param_dtype`` a layer passes, when the layer's
  ``param_dtype`` is left at its default: the parameter gets the
  initializer's dtype, as in 0.3 (today float32, and a float64 update of
  it raises in ``lax.add``).
* ``param_override``: a Module subclass that overrides ``param(self, name,
  init_fn, shape)`` is called without the ``param_dtype`` today's
  ``nn.Conv`` / ``nn.Dense`` pass as a fifth argument.
* ``carries``: ``LSTMCell / GRUCell / OptimizedLSTMCell / ConvLSTMCell
  .initialize_carry(rng, batch_dims, size[, init_fn])``, the flax 0.3
  static method, beside today's instance method; the first three cells built
  without ``features`` read the hidden size from the carry, as in flax 0.3.
* ``attention``: ``MultiHeadDotProductAttention(...)(inputs_q, inputs_kv,
  mask[, deterministic])``, flax 0.3's positional signature (today the
  third positional argument is ``inputs_v``).
* ``early_stopping``: ``has_improved, state = early_stop.update(metric)``
  (flax 0.3's tuple) beside today's ``state = early_stop.update(metric)``.
* ``group_norm``: ``GroupNorm`` applies ``scale`` / ``bias`` stored as
  ``(1, ..., 1, C)`` (the input's rank), the shape flax <= 0.3.5 created
  them with (0.3.6 and today: ``(C,)``, and ScopeParamShapeError for the
  old one); the values are used as the ``(C,)`` ones would be, so the
  result is bit for bit that of the squeezed tree.  ``init`` still creates
  ``(C,)``.

The flax modules are not imported for this: each restoration is applied
when its module is (``_hook.after_import``), so activation at ``import
jax`` under ``FLAXLEGACY=on`` stays cheap.  Everything reaches into flax
only through the few names below; a flax that moved them makes the
restoration fail to apply (logged at debug level), and
tests/test_early_linen.py fails.
"""

import functools
import hashlib
import inspect
import logging
import threading
import weakref

logger = logging.getLogger('flaxlegacy')

_MARK = '_flaxlegacy_modern'


def _deferred(module_name, restore):
  """Runs ``restore(module)`` once ``module_name`` is imported (or now)."""
  from flaxlegacy import _hook  # pylint: disable=g-import-not-at-top

  def apply(module):
    try:
      restore(module)
    except Exception:  # pylint: disable=broad-except
      logger.debug('flaxlegacy: early-linen behaviour %s not restored',
                   restore.__name__, exc_info=True)

  _hook.after_import(module_name, apply)


def _marked(fn, modern):
  setattr(fn, _MARK, modern)
  return fn


# --- linen_keys ----------------------------------------------------------------


def _fold_legacy(rng, data):
  """flax 0.3.x: a name by its SHA-1 hash, an integer as it is, one by one."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  for x in data:
    if isinstance(x, str):
      digest = hashlib.sha1(x.encode('utf-8')).digest()
      rng = jax.random.fold_in(rng, jnp.uint32(
          int.from_bytes(digest[:4], byteorder='big')))
    elif isinstance(x, int):
      rng = jax.random.fold_in(rng, x)
    else:
      raise ValueError(f'Expected int or string, got: {x}')
  return rng


def _restore_linen_keys(scope_module):
  lazy_rng = scope_module.LazyRng
  modern = lazy_rng.__dict__['create'].__func__

  def create(rng, *suffix):
    if isinstance(rng, lazy_rng):
      rng = rng.as_jax_rng()  # (no suffix left once this is applied)
    return lazy_rng(_fold_legacy(rng, suffix), ())

  lazy_rng.create = staticmethod(_marked(functools.wraps(modern)(create),
                                         modern))

  # make_rng counters of a child scope: flax 0.3 kept them on the child
  # Scope object, so a child pushed again through the same parent object
  # (reuse) counts on, and a fresh parent (each trace of a lifted
  # transform's body: nn.scan, nn.vmap, nn.jit ...) starts from zero.
  # Today they live in the parent's counter dict, which lifted scopes share
  # with the scope outside: a scan body traced twice drew its second keys
  # with counter 2.
  scope_cls = scope_module.Scope
  modern_push = scope_cls.push

  @functools.wraps(modern_push)
  def push(self, name=None, prefix='', reuse=False):
    child = modern_push(self, name, prefix, reuse)
    counters = self.__dict__.setdefault('_flaxlegacy_child_counters', {})
    if child.name not in counters:
      counters[child.name] = {key: 0 for key in child.rngs}
    child.rng_counters = counters[child.name]
    return child

  scope_cls.push = _marked(push, modern_push)


# --- initializers ----------------------------------------------------------------

_signatures = weakref.WeakKeyDictionary()


def _signature(fn):
  try:
    return _signatures[fn]
  except (KeyError, TypeError):
    pass
  try:
    sig = inspect.signature(fn)
  except (TypeError, ValueError):
    sig = None
  try:
    _signatures[fn] = sig
  except TypeError:  # not weakly referenceable
    pass
  return sig


def _is_dtype(x):
  if x is None or isinstance(x, (bool, int, float)):
    return False
  import numpy as np  # pylint: disable=g-import-not-at-top
  try:
    np.dtype(x)
  except Exception:  # pylint: disable=broad-except
    return False
  return True


def _binds(sig, args, kwargs):
  try:
    sig.bind(*args, **kwargs)
  except TypeError:
    return False
  return True


def without_dtype(fn, lead, args, kwargs):
  """True if ``fn(*lead, *args, **kwargs)`` cannot bind only because of a
  trailing dtype in ``args`` that flax 0.3 did not pass."""
  if not args or not _is_dtype(args[-1]):
    return False
  sig = _signature(fn)
  if sig is None:
    return False
  return (not _binds(sig, (*lead, *args), kwargs) and
          _binds(sig, (*lead, *args[:-1]), kwargs))


def _restore_initializers(scope_module):
  scope_cls = scope_module.Scope
  modern = scope_cls.param

  @functools.wraps(modern)
  def param(self, name, init_fn, *init_args, **kwargs):
    init_kwargs = {k: v for k, v in kwargs.items() if k != 'unbox'}
    if without_dtype(init_fn, (None,), init_args, init_kwargs):
      init_args = init_args[:-1]
    return modern(self, name, init_fn, *init_args, **kwargs)

  scope_cls.param = _marked(param, modern)


def stated_dtype(fn, lead, args, kwargs):
  """The dtype ``fn`` states for itself where the trailing dtype of ``args``
  would go, or None.

  jax's initializers default their ``dtype`` to None; a non-None default
  is a choice made when the initializer was built
  (``lecun_normal(dtype=jnp.float64)``) or written (``def init(key, shape,
  dtype=jnp.complex64)``).  flax 0.3 called ``init(key, shape)``, so that
  choice made the parameter's dtype; today's layers pass their
  ``param_dtype`` over it.
  """
  if not args or not _is_dtype(args[-1]):
    return None
  sig = _signature(fn)
  if sig is None or not (_binds(sig, (*lead, *args), kwargs) and
                         _binds(sig, (*lead, *args[:-1]), kwargs)):
    return None
  positional = [p for p in sig.parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
  at = len(lead) + len(args) - 1
  if at >= len(positional):  # taken by *args
    return None
  default = positional[at].default
  if default is inspect.Parameter.empty or not _is_dtype(default):
    return None
  return default


def _default_param_dtype(module, dtype):
  """True if ``dtype`` is ``module``'s ``param_dtype`` left at its default
  (flax 0.3 layers had no ``param_dtype``; code written for them never
  sets it)."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  field = getattr(type(module), '__dataclass_fields__', {}).get('param_dtype')
  if field is None or field.default is dataclasses.MISSING:
    return False
  try:
    own = getattr(module, 'param_dtype')
    return (np.dtype(own) == np.dtype(dtype) and
            np.dtype(own) == np.dtype(field.default))
  except Exception:  # pylint: disable=broad-except
    return False


def _differs(a, b):
  from jax import dtypes  # pylint: disable=g-import-not-at-top
  return dtypes.canonicalize_dtype(a) != dtypes.canonicalize_dtype(b)


def _restore_initializer_dtype(module_module):
  module_cls = module_module.Module
  modern = module_cls.param

  @functools.wraps(modern)
  def param(self, name, init_fn, *init_args, **kwargs):
    init_kwargs = {k: v for k, v in kwargs.items() if k != 'unbox'}
    stated = stated_dtype(init_fn, (None,), init_args, init_kwargs)
    if (stated is not None and _differs(stated, init_args[-1]) and
        _default_param_dtype(self, init_args[-1])):
      init_args = init_args[:-1]
    return modern(self, name, init_fn, *init_args, **kwargs)

  module_cls.param = _marked(param, modern)


# --- param_override ---------------------------------------------------------------


def _restore_param_override(module_module):
  module_cls = module_module.Module
  modern = module_cls._call_wrapped_method  # pylint: disable=protected-access

  @functools.wraps(modern)
  def _call_wrapped_method(self, fun, args, kwargs):
    if (getattr(fun, '__name__', None) == 'param' and
        without_dtype(fun, (self,), args, kwargs)):
      args = args[:-1]
    return modern(self, fun, args, kwargs)

  module_cls._call_wrapped_method = _marked(_call_wrapped_method, modern)  # pylint: disable=protected-access


# --- carries ------------------------------------------------------------------------

# cell class name -> how flax 0.3 built the carry's shape and parts
_CARRY_CELLS = {
    'LSTMCell': ('features', 2),
    'OptimizedLSTMCell': ('features', 2),
    'GRUCell': ('features', 1),
    'ConvLSTMCell': ('shape', 2),
}
# cells flax 0.3 built without ``features`` (the hidden size is the carry's)
_FEATURELESS = ('LSTMCell', 'OptimizedLSTMCell', 'GRUCell')


def _legacy_carry(size_kind, parts):

  def initialize_carry(rng, batch_dims, size, init_fn=None):
    import jax  # pylint: disable=g-import-not-at-top
    if init_fn is None:
      init_fn = jax.nn.initializers.zeros
    shape = tuple(batch_dims) + (
        (size,) if size_kind == 'features' else tuple(size))
    if parts == 1:
      return init_fn(rng, shape)
    key1, key2 = jax.random.split(rng)
    return init_fn(key1, shape), init_fn(key2, shape)

  return initialize_carry


class _InitializeCarry:
  """``Cell.initialize_carry``: flax 0.3's static form on the class.

  On an instance, today's method.  On the class, a call whose first
  argument is a Module is today's method called unbound; any other call
  (``nn.LSTMCell.initialize_carry(rng, (batch,), size)``), which raises
  today, is flax 0.3's static method.
  """

  nowrap = True

  def __init__(self, modern, legacy, cell_name):
    self.modern = modern
    self.legacy = legacy
    self.cell_name = cell_name
    functools.update_wrapper(self, modern)

  def __get__(self, obj, cls=None):
    if obj is not None:
      if self.cell_name in _FEATURELESS and getattr(obj, 'features',
                                                    0) is None:
        raise TypeError(
            f'{type(obj).__name__}.initialize_carry(rng, input_shape) needs '
            f'features: this cell was built without it (flax 0.3 style, '
            'hidden size from the carry). Pass features=..., or call flax '
            f"0.3's {self.cell_name}.initialize_carry(rng, batch_dims, size) "
            'on the class.')
      return self.modern.__get__(obj, cls)
    from flax import linen  # pylint: disable=g-import-not-at-top
    modern, legacy = self.modern, self.legacy

    @functools.wraps(modern)
    def initialize_carry(*args, **kwargs):
      if args and isinstance(args[0], linen.Module):
        return modern(*args, **kwargs)
      return legacy(*args, **kwargs)

    return initialize_carry


def _optional_features(cls):
  """``features`` of ``cls`` defaults to None (flax 0.3 had no such field).

  The default goes on the dataclass field, which subclasses made later
  inherit (``nn.scan(nn.LSTMCell, ...)`` builds one), and ``__init__``
  passes None when it is left out.
  """
  import dataclasses  # pylint: disable=g-import-not-at-top
  field = cls.__dataclass_fields__['features']
  if field.default is not dataclasses.MISSING:
    return
  field.default = None
  modern = cls.__init__

  @functools.wraps(modern)
  def __init__(self, *args, **kwargs):  # pylint: disable=invalid-name
    if not args and 'features' not in kwargs:
      kwargs['features'] = None
    modern(self, *args, **kwargs)

  cls.__init__ = _marked(__init__, modern)


def _restore_carries(recurrent_module):
  for name, (size_kind, parts) in _CARRY_CELLS.items():
    cls = getattr(recurrent_module, name)
    modern = cls.__dict__['initialize_carry']
    if isinstance(modern, _InitializeCarry):
      continue
    cls.initialize_carry = _InitializeCarry(
        modern, _legacy_carry(size_kind, parts), name)
    if name in _FEATURELESS:
      _optional_features(cls)


# --- attention --------------------------------------------------------------------


def _restore_attention(attention_module):
  cls = attention_module.MultiHeadDotProductAttention
  modern = cls.__call__

  @functools.wraps(modern)
  def __call__(self, inputs_q, *args, **kwargs):  # pylint: disable=invalid-name
    # flax 0.3: (inputs_q, inputs_kv, mask=None, deterministic=None).
    # Today's third positional is inputs_v; a mask there (one axis more
    # than the keys) and any fourth positional raise today.
    if len(args) == 3 or (len(args) == 2 and args[1] is not None and
                          getattr(args[1], 'ndim', None) ==
                          getattr(args[0], 'ndim', -2) + 1):
      for name, value in zip(('mask', 'deterministic'), args[1:]):
        if name in kwargs:
          raise TypeError(
              f"__call__() got multiple values for argument '{name}'")
        kwargs[name] = value
      args = args[:1]
    return modern(self, inputs_q, *args, **kwargs)

  cls.__call__ = _marked(__call__, modern)


# --- early_stopping ---------------------------------------------------------------


def _restore_early_stopping(early_stopping_module):
  cls = early_stopping_module.EarlyStopping
  if '__iter__' in cls.__dict__:
    return

  def __iter__(self):  # pylint: disable=invalid-name
    # flax 0.3: ``update`` returned (has_improved, new state).
    return iter((self.has_improved, self))

  cls.__iter__ = _marked(__iter__, None)


# --- group_norm ---------------------------------------------------------------

# The ranks of the inputs of the GroupNorm calls running in this thread
# (innermost last): flax <= 0.3.5's layout of a (C,) parameter is
# (1,) * (rank - 1) + (C,), and ``param`` does not see the input.
_group_norm_calls = threading.local()


def _group_norm_ranks():
  ranks = getattr(_group_norm_calls, 'ranks', None)
  if ranks is None:
    ranks = _group_norm_calls.ranks = []
  return ranks


def legacy_group_norm_layout(stored, requested, rank):
  """True if ``stored`` is flax <= 0.3.5's GroupNorm layout of a parameter
  today's GroupNorm asks for with shape ``requested`` (``(C,)``), for an
  input of rank ``rank``: ``(1, ..., 1, C)``, the input's rank."""
  requested = tuple(requested)
  return (len(requested) == 1 and rank >= 2 and
          tuple(stored) == (1,) * (rank - 1) + requested)


def _restore_group_norm(normalization_module):
  import numpy as np  # pylint: disable=g-import-not-at-top
  from flax.linen import module as module_lib  # pylint: disable=g-import-not-at-top
  cls = normalization_module.GroupNorm
  if 'param' in cls.__dict__:
    return
  modern_call = cls.__call__

  @functools.wraps(modern_call)
  def __call__(self, x, *args, **kwargs):  # pylint: disable=invalid-name
    ranks = _group_norm_ranks()
    ranks.append(np.ndim(x))
    try:
      return modern_call(self, x, *args, **kwargs)
    finally:
      ranks.pop()

  def param(self, name, init_fn, *init_args, **init_kwargs):
    # Today's GroupNorm asks for scale / bias of shape (C,) and reshapes
    # what it gets to (1, ..., 1, C); a stored (1, ..., 1, C) (flax <=
    # 0.3.5) fails only the shape check, which is made against an
    # initializer of the stored shape.  The initializer is never called
    # for values: the parameter exists.
    ranks = _group_norm_ranks()
    if (name in ('scale', 'bias') and ranks and init_args and
        self.scope is not None and self.scope.has_variable('params', name)):
      import jax  # pylint: disable=g-import-not-at-top
      import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
      leaves = jax.tree_util.tree_leaves(
          self.scope.get_variable('params', name))
      try:
        requested = tuple(init_args[0])
      except TypeError:
        requested = None
      if (len(leaves) == 1 and requested is not None and
          legacy_group_norm_layout(np.shape(leaves[0]), requested,
                                   ranks[-1])):
        shape, dtype = np.shape(leaves[0]), leaves[0].dtype
        init_fn = lambda *unused_args, **unused_kwargs: jnp.zeros(shape, dtype)
    return module_lib.Module.param(self, name, init_fn, *init_args,
                                   **init_kwargs)

  cls.__call__ = _marked(__call__, modern_call)
  cls.param = _marked(param, None)


_RESTORE = {
    'linen_keys': ('flax.core.scope', _restore_linen_keys),
    'initializers': (('flax.core.scope', _restore_initializers),
                     ('flax.linen.module', _restore_initializer_dtype)),
    'param_override': ('flax.linen.module', _restore_param_override),
    'carries': ('flax.linen.recurrent', _restore_carries),
    'attention': ('flax.linen.attention', _restore_attention),
    'early_stopping': ('flax.training.early_stopping',
                       _restore_early_stopping),
    'group_norm': ('flax.linen.normalization', _restore_group_norm),
}


def restore(name):
  """Schedules one restoration for when its flax module is imported."""
  how = _RESTORE[name]
  for module_name, fn in (how if isinstance(how[0], tuple) else (how,)):
    _deferred(module_name, fn)
