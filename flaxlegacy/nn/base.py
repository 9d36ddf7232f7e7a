"""The legacy module system (legacy ``flax.nn.base``), written on today's JAX.

How a legacy program runs (spec legacy-nn.md section 2):

* A module is a subclass of ``Module`` with an ``apply`` method.  Calling the
  class inside another module's ``apply`` runs it at once and returns its
  output; ``Cls.init`` / ``Cls.call`` run it at the top level.
* Every invocation gets a *frame* (``_ModuleFrame``): its name, parent, the
  dict of its parameters (the very dict that lives in the parent's dict) and,
  in init mode, its PRNG key.  Frames live on the thread-local
  ``_module_stack``.
* Names: explicit, or ``ClassName_N`` with one counter per parent frame
  invocation shared by every class (and by unnamed ``.shared()`` modules,
  which get the bare digit).  Keys: ``F(parent_key, child_name)`` and
  ``F(frame_key, param_name)`` where ``F`` folds the SHA-1 of the name into
  the key (``_fold_in_str``).
* State (``nn.stateful``, ``Module.state``), captured outputs and the
  attention cache live in ``Collection`` objects keyed by module path.

All of this is legacy semantics and is implemented here; the arithmetic of the
layers (``linear.py``, ``normalization.py`` ...) is delegated to linen.
"""

import abc
import collections.abc
import contextlib
import functools
import hashlib
import inspect
import os
import sys
from typing import Any
import warnings

from flax import serialization
from flax import struct
import jax
import numpy as np

from flaxlegacy.nn import utils
# Imported by name from the submodule: the package attribute
# ``flaxlegacy.nn.stochastic`` is the context-manager function, not the module.
from flaxlegacy.nn.stochastic import is_stochastic as _is_stochastic
from flaxlegacy.nn.stochastic import make_rng as _make_rng
from flaxlegacy.nn.stochastic import stochastic as _stochastic

_module_stack = utils.CallStack()
_module_output_trackers = utils.CallStack()
_state_stack = utils.CallStack()

MODULE_CLASSMETHODS = [
    'create', 'create_by_shape', 'init', 'init_by_shape', 'call', 'partial'
]


# --- PRNG: folding names into keys -----------------------------------------


@functools.lru_cache(maxsize=4096)
def _str_hash(data):
  """First 4 bytes of SHA-1(data) as an unsigned big-endian 32-bit int.

  Legacy 0.3.1+ read the bytes as a *signed* int; the bit pattern, hence the
  folded key, is the same, and today's ``fold_in`` rejects negative ints.
  """
  digest = hashlib.sha1(data.encode('utf-8')).digest()
  return np.uint32(int.from_bytes(digest[:4], byteorder='big'))


# Jitted once: an eager ``jax.random.fold_in``/``split`` dispatches each of its
# inner primitives separately (~1 ms); the jitted call is one dispatch.  Same
# values; inside a trace they become one nested call.
_fold_in = jax.jit(jax.random.fold_in)
_split = jax.jit(jax.random.split)


def _fold_in_str(rng, data):
  """Folds the string ``data`` into the key ``rng`` (legacy ``F(rng, s)``)."""
  return _fold_in(rng, _str_hash(data))


# --- frames -----------------------------------------------------------------


class _ModuleFrame:
  """The scope of one invocation of one module (spec 2.2).

  ``params`` is the dict this module reads (apply mode) or fills (init mode:
  ``rng`` is not None); ``shared`` records, per child name, whether that child
  was a shared module (duplicate-name detection); ``shared_names`` holds the
  names declared with ``.shared()`` in this frame.
  """

  __slots__ = ('name', 'parent', 'rng', 'params', 'shared', 'shared_names',
               'transparent', '_name_counter', '_path')

  def __init__(self, name, parent=None, params=None, rng=None,
               transparent=False):
    self.name = name
    self.parent = parent
    self.rng = rng
    self.params = {} if params is None else params
    self.shared = {}
    self.shared_names = set()
    self.transparent = transparent
    self._name_counter = 0
    self._path = None

  @property
  def is_init(self):
    return self.rng is not None

  @property
  def path(self):
    """'/'-separated path of this frame; transparent parents add nothing."""
    path = self._path
    if path is None:
      parent = self.parent
      if parent is None:
        path = '/' if self.name is None else '/' + self.name
      else:
        path = parent.path
        if not parent.transparent:
          path = (path if path.endswith('/') else path + '/') + self.name
      self._path = path
    return path

  def is_descendent_of(self, frame):
    """True if ``frame`` is an ancestor (every frame descends from None)."""
    parent = self.parent
    while True:
      if parent is frame:
        return True
      if parent is None:
        return False
      parent = parent.parent

  def create_name(self):
    """The next value of this frame's naming counter, as a string."""
    name = str(self._name_counter)
    self._name_counter += 1
    return name

  def __repr__(self):
    mode = 'init' if self.is_init else 'apply'
    return f'<_ModuleFrame {self.path} ({mode})>'


def _top_frame(call_name):
  if not _module_stack:
    raise ValueError('%s should only be used inside a '
                     'module\'s apply function.' % call_name)
  return _module_stack[-1]


def _track_outputs(y):
  """Appends ``y`` to the current path's list in every output tracker."""
  for tracker in _module_output_trackers:
    ys = tracker.retrieve(default=[])
    ys.append(y)
    tracker.store(ys)


def _run(cls, frame, args, kwargs):
  """Runs ``cls.apply`` as the module of ``frame`` and returns its output."""
  # Like legacy, the instance is made without __init__: ``self`` is an
  # ordinary mutable object carrying its frame.  (object.__new__ also refuses
  # a class whose ``apply`` is still abstract.)
  instance = object.__new__(cls)
  instance._frame = frame  # pylint: disable=protected-access
  frames = _module_stack._frames  # pylint: disable=protected-access
  frames.append(frame)
  try:
    y = instance.apply(*args, **kwargs)
    if _module_output_trackers:
      _track_outputs(y)
  finally:
    frames.pop()
  return y


# --- Module -----------------------------------------------------------------


def _fn_parameters(fn):
  """Legacy private helper: the ``inspect.Parameter`` objects of ``fn``, as a
  tuple in declaration order."""
  return tuple(inspect.signature(fn).parameters.values())


def _apply_signature(apply_fn):
  """``apply``'s signature without ``self`` (for ``help()`` and IDEs)."""
  try:
    sig = inspect.signature(apply_fn)
  except (TypeError, ValueError):
    return None
  params = list(sig.parameters.values())
  # ``@nn.module`` wraps a function that has no ``self``.
  if params and inspect.unwrap(apply_fn) is apply_fn:
    params = params[1:]
  return sig.replace(parameters=params)


class _ModuleMeta(abc.ABCMeta):
  """Metaclass of ``Module``: calling a module class runs the module.

  ``Cls(*args, name=None, **kwargs)`` inside another module's ``apply`` is a
  sub-module invocation (spec 2.3) and returns the module's output, never an
  instance.  Cosmetic: the class shows ``apply``'s docstring and signature.
  """

  def __init__(cls, name, bases, attrs):
    super().__init__(name, bases, attrs)
    apply_fn = getattr(cls, 'apply', None)
    if apply_fn is None:
      return
    if attrs.get('__doc__') is None and apply_fn.__doc__:
      cls.__doc__ = apply_fn.__doc__
    # Partial/shared subclasses inherit the signature attribute; computing
    # it only where ``apply`` is defined keeps ``partial()`` cheap.
    if 'apply' in attrs:
      sig = _apply_signature(apply_fn)
      if sig is not None:
        cls.__signature__ = sig

  def __call__(cls, *args, name=None, **kwargs):
    if not _module_stack:
      raise ValueError('A Module should only be instantiated directly inside'
                       ' another module.')
    parent = cls._get_construction_frame()
    kwargs = cls._extend_kwargs(kwargs)
    if name is None:
      name = cls._default_name()
    elif cls._is_shared():
      raise ValueError('Cannot override the name of a shared module')
    if name is None:
      name = cls.__name__ + '_' + parent.create_name()
    cls._check_name(name, parent)
    parent_params = parent.params
    if parent.rng is not None and name not in parent_params:
      parent_rng = parent.rng
      rng = utils.run_eager(parent_rng,
                            lambda: _fold_in_str(parent_rng, name))
      params = parent_params[name] = {}
    else:
      # Apply mode -- also for the 2nd call of a shared module during init.
      if name not in parent_params:
        raise ValueError(f'No module named {name} was created during'
                         ' initialization.')
      params = parent_params[name]
      rng = None
    frame = _ModuleFrame(name, parent, params, rng, cls._is_transparent())
    return _run(cls, frame, args, kwargs)


class Module(metaclass=_ModuleMeta):
  """Base class of legacy modules: subclasses define ``apply``.

  Class-level configuration, set by ``partial``/``shared`` on the subclasses
  they create (read through the legacy hook classmethods below):
  """

  _nn_partial_kwargs = {}  # partial keyword arguments (outer partials win)
  _nn_default_name = None  # name given by partial(name=) or shared()
  _nn_shared = False
  _nn_construction_frame = None  # for shared modules: where shared() ran
  _nn_transparent = False

  @abc.abstractmethod
  def apply(self, *args, **kwargs):
    pass

  # -- hooks (legacy private classmethods; subclasses may override) --

  @classmethod
  def _extend_kwargs(cls, kwargs):
    partial_kwargs = cls._nn_partial_kwargs
    if not partial_kwargs:
      return kwargs
    extended = dict(partial_kwargs)
    extended.update(kwargs)
    return extended

  @classmethod
  def _default_name(cls):
    return cls._nn_default_name

  @classmethod
  def _is_shared(cls):
    return cls._nn_shared

  @classmethod
  def _get_construction_frame(cls):
    """The frame whose params hold this module's entry (spec 2.3 step 2)."""
    frame = cls._nn_construction_frame
    return _module_stack[-1] if frame is None else frame

  @classmethod
  def _is_transparent(cls):
    return cls._nn_transparent

  @classmethod
  def _pre_process_params(cls, params):
    return params

  @classmethod
  def _post_process_params(cls, params):
    return params

  @classmethod
  def _check_name(cls, name, parent):
    """Validates ``name`` in ``parent`` and records it (spec 2.3 step 5)."""
    if name is not None:
      if not isinstance(name, str):
        raise ValueError('Name must be a string.')
      if '/' in name or ':' in name:
        raise ValueError('Name should not contain slashes or colons.')
    shared = cls._is_shared()
    recorded = parent.shared.get(name)
    if recorded is not None:
      if recorded != shared:
        raise ValueError(f'The name "{name}" is used for both a shared'
                         ' and unshared module.')
      if not recorded:
        raise ValueError(f'A module with named "{name}" already exists.')
    parent.shared[name] = shared

  # -- derived classes --

  @classmethod
  def partial(cls, *, name=None, **kwargs):
    """A subclass with ``kwargs`` (and ``name``) applied by default.

    Call-time keyword arguments override the partial ones; outer partials
    override inner ones.  The subclass keeps ``__name__``/``__qualname__``.
    """
    merged = dict(cls._nn_partial_kwargs)
    merged.update(kwargs)
    attrs = {'_nn_partial_kwargs': merged, '__module__': cls.__module__,
             '__qualname__': cls.__qualname__}
    if name is not None:
      attrs['_nn_default_name'] = name
    return type(cls)(cls.__name__, (cls,), attrs)

  @classmethod
  def shared(cls, *, name=None, **kwargs):
    """A partial subclass whose every call shares one params entry.

    Must be called inside ``apply``; the entry lives in the frame where
    ``shared`` is called, under ``name`` (default: the next value of that
    frame's naming counter, as a bare digit string).
    """
    if not _module_stack:
      raise ValueError(
          'The shared module should be used during Module application')
    parent = _module_stack[-1]
    if name is None:
      name = parent.create_name()
    if name in parent.shared_names:
      raise ValueError(f'Shared module named "{name}" already exists.')
    parent.shared_names.add(name)
    partial_cls = cls.partial(**kwargs)
    attrs = {'_nn_default_name': name, '_nn_shared': True,
             '_nn_construction_frame': parent,
             '__module__': cls.__module__, '__qualname__': cls.__qualname__}
    return type(cls)(cls.__name__, (partial_cls,), attrs)

  # -- top-level entry points --

  @classmethod
  def init(cls, _rng, *args, name=None, **kwargs):
    """Initialises the module: returns ``(output, params)``."""
    kwargs = cls._extend_kwargs(kwargs)
    parent = _module_stack[-1] if _module_stack else None
    if name is None:
      name = cls._default_name()
    frame = _ModuleFrame(name, parent=parent, rng=_rng,
                         transparent=cls._is_transparent())
    y = _run(cls, frame, args, kwargs)
    return y, cls._post_process_params(frame.params)

  @classmethod
  def init_by_shape(cls, _rng, input_specs, *args, name=None, **kwargs):
    """Initialises from input shapes only: returns ``(output, params)``.

    ``input_specs`` is an iterable of shapes or ``(shape, dtype)`` pairs, one
    per leading positional input.  Parameters come out concrete (identical to
    ``init``); outputs that depend on the inputs are ``ShapeDtypeStruct``s.
    """
    specs = _parse_input_specs(input_specs)
    # Lift an enclosing nn.stochastic context into the abstract evaluation:
    # it costs one make_rng() of that context (spec 2.5, trap 8).
    stochastic_rng = _make_rng() if _is_stochastic() else None

    def lazy_init(*inputs):
      if stochastic_rng is None:
        return cls.init(_rng, *inputs, *args, name=name, **kwargs)
      with _stochastic(stochastic_rng):
        return cls.init(_rng, *inputs, *args, name=name, **kwargs)

    return _eval_by_shape(lazy_init, specs)

  @classmethod
  def call(cls, params, *args, name=None, **kwargs):
    """Applies the module with ``params``; returns its output."""
    params = cls._pre_process_params(params)
    kwargs = cls._extend_kwargs(kwargs)
    parent = _module_stack[-1] if _module_stack else None
    if name is None:
      name = cls._default_name()
    frame = _ModuleFrame(name, parent=parent, params=params,
                         transparent=cls._is_transparent())
    return _run(cls, frame, args, kwargs)

  @classmethod
  def create(cls, _rng, *args, name=None, **kwargs):
    """Deprecated: ``init`` then ``Model(cls, params)``."""
    warnings.warn('`create()` will be removed soon.'
                  ' Use `init()` to initialize parameters and then explicitly'
                  ' create a `nn.Model` given the module and initialized'
                  ' parameters.', DeprecationWarning, stacklevel=2)
    y, params = cls.init(_rng, *args, name=name, **kwargs)
    return y, Model(cls, params)

  @classmethod
  def create_by_shape(cls, _rng, input_specs, *args, name=None, **kwargs):
    """Deprecated: ``init_by_shape`` then ``Model(cls, params)``."""
    warnings.warn('`create_by_shape()` will be removed soon.'
                  ' Use `init_by_shape()` to initialize parameters and then'
                  ' explicitly create a `nn.Model` given the module and'
                  ' initialized parameters.', DeprecationWarning, stacklevel=2)
    y, params = cls.init_by_shape(_rng, input_specs, *args, name=name,
                                  **kwargs)
    return y, Model(cls, params)

  # -- inside apply --

  def param(self, name, shape, initializer):
    """Creates (init) or reads (apply) the parameter ``name``.

    At init the value is ``initializer(F(frame_key, name), shape)``.  When
    ``shape`` is not None the stored value's shape must equal it (a list
    never does, as in legacy).
    """
    frame = self._frame
    params = frame.params
    if frame.rng is not None:
      if name in params:
        raise ValueError(
            "Name '%s' was already used for another parameter." % name)
      rng = frame.rng
      params[name] = utils.run_eager(
          rng, lambda: initializer(_fold_in_str(rng, name), shape))
    if name not in params:
      raise ValueError("Parameter with name '%s' does not exist." % name)
    value = params[name]
    if shape is not None and value.shape != shape:
      # Legacy's message, then where: a wrong input size fed to a trained
      # layer is the usual cause, and the path names that layer.
      raise ValueError(
          'Existing shape {} differs from requested shape {}'.format(
              value.shape, shape) +
          f" (parameter '{name}' in module {frame.path})")
    return value

  def get_param(self, name):
    """The entry ``name`` of this module's params (a value or a child dict)."""
    params = self._frame.params
    if name not in params:
      raise ValueError("Parameter with name '%s' does not exist." % name)
    return params[name]

  def state(self, name, shape=None, initializer=None, collection=None):
    """A handle on the state variable ``name`` of this module (spec 2.8).

    The value lives in ``collection`` (default: the innermost
    ``nn.stateful`` collection) under this module's path.  With an
    initializer, while any frame on the stack initialises, the innermost
    such frame's key is split -- the frame keeps the first half, the
    initializer gets the second -- and the state is set to the result.
    """
    _top_frame('state')
    if collection is None:
      collection = get_state()
    handle = ModuleState(collection, name)
    if initializer is not None:
      init_frame = None
      for frame in reversed(_module_stack):
        if frame.rng is not None:
          init_frame = frame
          break
      if init_frame is not None:
        rng = init_frame.rng
        init_frame.rng, key = utils.run_eager(rng, lambda: _split(rng))
        handle.value = utils.run_eager(rng, lambda: initializer(key, shape))
    return handle

  def is_stateful(self):
    """Whether an ``nn.stateful`` context is active."""
    return is_stateful()

  def is_initializing(self):
    """Whether this invocation's own frame creates parameters."""
    _top_frame('is_initializing')
    return self._frame.rng is not None


def _eval_by_shape(fn, specs):
  """Evaluates ``fn`` on abstract inputs, keeping what does not need them.

  The semantics of legacy ``jax_utils.partial_eval_by_shape``: every output
  leaf computable without the input values comes back concrete (parameters,
  keys, collection records), the others as ``jax.ShapeDtypeStruct``.  Done
  here with ``jax.eval_shape`` while compile-time evaluation is on: each
  operation whose operands are all concrete runs eagerly at trace time (at
  eager speed, which JAX's partial evaluator does not reach for the many
  small jitted random functions of an initialisation), operations on the
  inputs are only traced.  Concrete leaves bypass ``eval_shape`` through a
  side channel.
  """
  captured = []

  def abstract_fn(*inputs):
    with jax.ensure_compile_time_eval():
      out = fn(*inputs)
    leaves, treedef = jax.tree_util.tree_flatten(out)
    # Tracers of this trace depend on the inputs; tracers of an enclosing
    # trace (init_by_shape under jit) are values like any other.
    own = {id(x._trace) for x in inputs}  # pylint: disable=protected-access
    staged = [i for i, leaf in enumerate(leaves)
              if isinstance(leaf, jax.core.Tracer) and id(leaf._trace) in own]  # pylint: disable=protected-access
    captured.append((leaves, treedef, staged))
    return [leaves[i] for i in staged]

  structs = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in specs]
  abstract = jax.eval_shape(abstract_fn, *structs)
  leaves, treedef, staged = captured[-1]
  leaves = list(leaves)
  for i, struct_ in zip(staged, abstract):
    leaves[i] = jax.ShapeDtypeStruct(struct_.shape, struct_.dtype)
  return jax.tree_util.tree_unflatten(treedef, leaves)


def _parse_input_specs(input_specs):
  """``input_specs`` as (shape, dtype) pairs, with a clear error if invalid.

  Same reading as legacy: an element of length 2 whose first item is
  iterable is ``(shape, dtype)``, anything else iterable is a bare shape
  (float32).
  """
  try:
    specs = list(input_specs)
  except TypeError:
    raise TypeError(
        'input_specs must be an iterable of shapes or (shape, dtype) pairs,'
        f' got {input_specs!r}.') from None
  parsed = []
  for spec in specs:
    try:
      spec = tuple(spec)
      if len(spec) == 2 and isinstance(spec[0], collections.abc.Iterable):
        shape, dtype = tuple(spec[0]), spec[1]
      else:
        shape, dtype = spec, np.float32
      jax.ShapeDtypeStruct(shape, dtype)  # validates shape and dtype
    except TypeError as e:
      raise TypeError(
          'input_specs must be an iterable of shapes or (shape, dtype) pairs;'
          f' invalid element {spec!r}: {e}') from None
    parsed.append((shape, dtype))
  return parsed


# --- @nn.module, @nn.module_method ----------------------------------------


def module(fun):
  """Turns ``fun(*args, **kwargs)`` into a Module subclass named after it."""

  @functools.wraps(fun)
  def apply(self, *args, **kwargs):
    del self  # the function has no use for the instance
    return fun(*args, **kwargs)

  return _ModuleMeta(fun.__name__, (Module,), {
      'apply': apply, '__module__': getattr(fun, '__module__', __name__),
      '__qualname__': getattr(fun, '__qualname__', fun.__name__)})


def module_method(fn):
  """Makes ``fn(self, ...)`` a module that shares its class's parameters.

  Reading ``Cls.fn`` (on the class, a partial/shared subclass, or an
  instance) gives a subclass of that class whose ``apply`` is ``fn``, so
  ``Model(Cls, params).fn(...)`` and ``Cls.shared(...).fn(...)`` run ``fn``
  over the same parameters as ``apply``.  Partial kwargs are forwarded too.
  """

  def method_class(cls):
    # One subclass per reading class, cached on that class itself.
    cache = cls.__dict__.get('_nn_module_methods')
    if cache is None:
      cache = {}
      setattr(cls, '_nn_module_methods', cache)
    method_cls = cache.get(fn)
    if method_cls is None:
      method_cls = type(cls)(fn.__name__, (cls,), {
          'apply': fn, '__module__': cls.__module__,
          '__qualname__': f'{cls.__qualname__}.{fn.__name__}'})
      cache[fn] = method_cls
    return method_cls

  method_class.__doc__ = fn.__doc__
  return utils.classproperty(method_class)


# --- transparent and truncated modules --------------------------------------


class TransparentModule(Module):
  """A wrapper invisible in params and paths: its one child is named '0'."""

  _nn_transparent = True

  @classmethod
  def _pre_process_params(cls, params):
    return {'0': params}

  @classmethod
  def _post_process_params(cls, params):
    if len(params) != 1:
      raise ValueError('Transparent modules should have exactly one child.')
    (key, value), = params.items()
    if key != '0':
      raise ValueError('Transparent modules should contain an unnamed child.')
    return value


class TruncatedModule(TransparentModule):
  """Runs ``wrapped_module`` and returns the outputs at ``truncate_path``."""

  def apply(self, *args, wrapped_module=None, truncate_path=None, **kwargs):
    """Returns, for each path in ``truncate_path``, the list of its outputs.

    Args:
      *args: positional arguments of the wrapped module.
      wrapped_module: the module class to run.
      truncate_path: a module path ('/block/fc1') or a pytree of paths.
      **kwargs: keyword arguments of the wrapped module.
    """
    if wrapped_module is None or truncate_path is None:
      raise ValueError(
          '`wrapped_module` and `truncate_path` are required keyword arguments')
    with capture_module_outputs() as outputs:
      wrapped_module(*args, **kwargs, name='0')
    return jax.tree_util.tree_map(lambda path: outputs[path], truncate_path)


# --- state -------------------------------------------------------------------


@contextlib.contextmanager
def capture_module_outputs():
  """Collects every module's outputs, keyed by module path, into a list each."""
  with Collection().mutate() as outputs:
    with _module_output_trackers.frame(outputs):
      yield outputs


class ModuleState:
  """Handle on one state variable (see ``Module.state``).

  The value is read from and written to the collection slot of the module
  executing at access time.
  """

  __slots__ = ('_collection', '_name')

  def __init__(self, collection, name):
    self._collection = collection
    self._name = name

  def _get_state_dict(self):
    state_dict = self._collection.retrieve(default={})
    assert isinstance(state_dict, dict), (
        f'state of this module in the collection is not a dict: {state_dict!r}')
    return state_dict

  @property
  def name(self):
    return self._name

  @property
  def value(self):
    state_dict = self._get_state_dict()
    if self._name not in state_dict:
      raise ValueError(f'No state variable named `{self._name}` exists.')
    return state_dict[self._name]

  @value.setter
  def value(self, v):
    # A new dict is stored (legacy updated the stored one in place, so a
    # write refused by an immutable collection still changed its contents).
    state_dict = dict(self._get_state_dict())
    state_dict[self._name] = v
    self._collection.store(state_dict)


@contextlib.contextmanager
def stateful(state=None, mutable=True):
  """Context whose Collection holds the state of the modules run inside it.

  ``mutable=True`` (init, training): yields a mutable copy of ``state`` (a
  new empty Collection when None) which holds the new state after the block;
  ``state`` itself is not modified.  ``mutable=False`` (evaluation): yields
  ``state``; any write raises.
  """
  if state is None:
    state = Collection()
  if mutable:
    with state.mutate() as new_state:
      with _state_stack.frame(new_state):
        yield new_state
  else:
    with _state_stack.frame(state):
      yield state


def is_stateful():
  """Whether an ``nn.stateful`` context is active."""
  return bool(_state_stack)


def get_state():
  """The Collection of the innermost ``nn.stateful`` context."""
  if not _state_stack:
    raise ValueError('Use the flax.nn.stateful context manager to enable'
                     ' stateful computations.')
  return _state_stack[-1]


# --- Model -------------------------------------------------------------------


@struct.dataclass
class Model:
  """A module class and its parameters; a pytree whose only child is params.

  ``model(*args)`` is ``module.call(params, *args)``; module methods are
  reached as attributes (``model.attend(q)``).
  """

  module: Any = struct.field(pytree_node=False)
  params: Any = struct.field(pytree_node=True)

  def __call__(self, *args, **kwargs):
    return self.module.call(self.params, *args, **kwargs)

  def truncate_at(self, module_path):
    """A Model returning the outputs recorded at ``module_path`` (a path or a
    pytree of paths), each as the list of that module's outputs."""
    truncated = TruncatedModule.partial(wrapped_module=self.module,
                                        truncate_path=module_path)
    return self.replace(module=truncated)

  def __getattr__(self, name):
    # Only reached for names not found normally.  Guard the fields so that
    # half-built instances (copy, pickle) do not recurse.
    if name in ('module', 'params'):
      raise AttributeError(name)
    value = getattr(self.module, name)
    if inspect.isclass(value) and issubclass(value, Module):
      params = self.params

      def method(*args, **kwargs):
        return value.call(params, *args, **kwargs)

      return method
    raise AttributeError(f'No attribute named "{name}".')

  def __hash__(self):
    # A Model is a hashable callable: jax.jit(model) compiles per instance,
    # with its params baked in.
    return id(self)


def _model_state_dict(model):
  return {'params': serialization.to_state_dict(model.params)}


def _model_from_state_dict(model, state):
  # Legacy flax.struct messages (today's add ", at path ...").
  state = dict(state)
  if 'params' not in state:
    raise ValueError('Missing field params in state dict while restoring'
                     ' an instance of Model')
  params_state = state.pop('params')
  if state:
    names = ','.join(state.keys())
    raise ValueError(f'Unknown field(s) "{names}" in state dict while'
                     ' restoring an instance of Model')
  params = serialization.from_state_dict(model.params, params_state,
                                         name='params')
  return model.replace(params=params)


serialization.register_serialization_state(
    Model, _model_state_dict, _model_from_state_dict, override=True)


# --- Collection ----------------------------------------------------------------


_OUT_OF_SCOPE = ('Trying to capture state outside the scope of this'
                 ' Collection. Most likely due to passing around a shared'
                 ' Module.')


class Collection:
  """Values keyed by module path: module state, captured outputs, caches.

  Paths are relative to the *anchor*, the module executing when the
  Collection was created (None at top level).  A Collection is immutable;
  ``mutate()`` yields a mutable copy for the duration of a ``with`` block.

  Attributes:
    state: the dict of stored values (used as given, not copied).
  """

  def __init__(self, state=None):
    if state is None:
      state = {}
    self.state = state
    self._anchor = _module_stack[-1] if _module_stack else None
    self._mutable = False
    self._main_level = None  # legacy trace level, unused since v0.2
    self._root = None

  def as_dict(self):
    """A shallow copy of the stored values."""
    return self.state.copy()

  def __getitem__(self, key):
    return self.state[key]

  @contextlib.contextmanager
  def mutate(self):
    """Yields a mutable clone (same leaves, new containers, same anchor)."""
    # Cloning flattens the collection: a mutable one refuses (see
    # iterate_collection), as in legacy.
    leaves, treedef = jax.tree_util.tree_flatten(self)
    new_col = jax.tree_util.tree_unflatten(treedef, leaves)
    new_col._mutable = True  # pylint: disable=protected-access
    new_col._main_level = utils._trace_level(utils._current_trace())  # pylint: disable=protected-access
    try:
      yield new_col
    finally:
      new_col._mutable = False  # pylint: disable=protected-access

  def retrieve(self, default=None):
    """The value stored for the executing module, or ``default``."""
    _top_frame('retrieve')
    return self.state.get(self._current_path(), default)

  def store(self, value):
    """Stores ``value`` for the executing module; returns the previous value."""
    frame = _top_frame('store')
    if not self._mutable:
      raise ValueError('Collection is not mutable. Use the `mutate` method to'
                       ' create a mutable copy.')
    anchor = self._anchor
    if frame is anchor:
      raise ValueError('State should be stored from within a module.'
                       ' Consider using the value directly instead of'
                       ' storing it in a Collection.')
    if not frame.is_descendent_of(anchor):
      raise ValueError(_OUT_OF_SCOPE)
    # Root rule: all writes must come from one top-level call below the
    # anchor, unless every top-level call writing here is named.
    root = self._find_root(frame)
    if self._root is None:
      self._root = root
    elif self._root is not root:
      if self._root.name is None or root.name is None:
        raise ValueError('When multiple top-level module calls use a'
                         ' Collection each top-level module should have a'
                         ' name.')
    path = self._current_path()
    old_value = self.state.get(path, None)
    self.state[path] = value
    return old_value

  def _find_root(self, frame):
    """The ancestor of ``frame`` (or itself) whose parent is the anchor."""
    root = frame
    while root.parent is not self._anchor:
      root = root.parent
    return root

  def _current_path(self):
    """Path of the executing module relative to the anchor."""
    frame = _module_stack[-1]
    anchor = self._anchor
    if frame is not anchor and not frame.is_descendent_of(anchor):
      # (legacy: a bare assert on reads; writes raised this message)
      raise ValueError(_OUT_OF_SCOPE)
    path = frame.path
    if anchor is not None:
      prefix = anchor.path
      if prefix != '/':
        return path[len(prefix):]
    return path

  def __repr__(self):
    return f'{type(self).__name__}({self.state!r})'


def iterate_collection(collection):
  """Pytree flatten of a Collection: children ``(state,)``, aux (type, anchor).

  A mutable collection must not cross a JAX transformation (its writes would
  be lost or leak tracers), so flattening one raises.
  """
  if collection._mutable:  # pylint: disable=protected-access
    raise ValueError('A mutable collection should not be transformed by Jax.')
  return (collection.state,), (type(collection), collection._anchor)  # pylint: disable=protected-access


def collection_from_iterable(meta, children):
  """Pytree unflatten of a Collection (or subclass, e.g. attention Cache)."""
  ty, anchor = meta
  collection = ty(children[0])
  collection._anchor = anchor  # pylint: disable=protected-access
  return collection


jax.tree_util.register_pytree_node(Collection, iterate_collection,
                                   collection_from_iterable)


def _collection_state_dict(collection):
  return {key: serialization.to_state_dict(value)
          for key, value in collection.as_dict().items()}


def _collection_from_state_dict(target, state):
  restored = {}
  for key, value in target.as_dict().items():
    if key not in state:
      raise KeyError(f'Missing key {key!r} in state dict while restoring a'
                     ' Collection')
    restored[key] = serialization.from_state_dict(value, state[key], name=key)
  return Collection(restored)


serialization.register_serialization_state(
    Collection, _collection_state_dict, _collection_from_state_dict,
    override=True)


if os.environ.get('FLAXLEGACY_RECORD_INITS'):
  # Record every top-level initialisation for numeric verification of an
  # upgrade (flaxlegacy/upgrade/observe.py ``record_inits``).
  from flaxlegacy.upgrade import observe as _observe  # pylint: disable=g-import-not-at-top
  _observe.record_inits(Module, _module_stack, sys.modules[__name__])
