"""What a program rewritten by ``flaxlegacy upgrade`` imports from flaxlegacy.

Plain linen + optax + flax serialization only: importing this module does
not activate the compatibility layer (no ``flax.nn``, no legacy PRNG or
checkpoint policy), so the upgraded program runs with ``FLAXLEGACY=off``.

``restore_checkpoint(ckpt_dir, target, ...)`` is
``flax.training.checkpoints.restore_checkpoint`` that also reads a
checkpoint the legacy program wrote before the upgrade (and
``save_checkpoint`` writes the legacy program's file format, one msgpack
file per step, not an Orbax directory): a legacy
``Optimizer`` (``{'target', 'state'}``, alone or inside a container) is
converted at load into the ``TrainState`` at the same place of ``target``,
with the mapping of docs/migration.md (``flaxlegacy convert``):

==========================================  =================================
legacy                                      TrainState
==========================================  =================================
``target/params/...`` (nn.Model)            ``params/...`` (names kept: the
                                            upgrade keeps legacy auto-names)
``state/step``                              ``step`` and every optax
                                            ``count``
``state/param_states/.../momentum``         ``trace`` (optax.sgd momentum)
``.../grad_ema``, ``.../grad_sq_ema``       ``mu``, ``nu`` (optax.adam,
                                            LAMB, AdaBelief)
``.../v``, ``.../mg``                       ``nu``, ``mu`` (RMSProp)
``.../G``                                   ``sum_of_squares`` (Adagrad)
``.../sq_avg``, ``.../acc_delta``           ``e_g``, ``e_x`` (Adadelta)
``state/param_states`` of a user            ``step`` and ``param_states``
``OptimizerDef`` (any fields)               of ``legacy_optax.
                                            OptimizerState``, field by field
``model_state`` (``'/a/b' -> {mean,var}``)  ``{'batch_stats': {a: {b: ..}}}``
==========================================  =================================
"""

from flax import serialization
from flax.training import checkpoints as _checkpoints

# optax state field -> the legacy per-parameter state fields it can hold
# (the first one the legacy state has is taken)
_FIELDS = {'trace': ('momentum',), 'mu': ('grad_ema', 'mg'),
           'nu': ('grad_sq_ema', 'v'), 'sum_of_squares': ('G',),
           'e_g': ('sq_avg',), 'e_x': ('acc_delta',),
           'v_row': ('v_row',), 'v_col': ('v_col',), 'v': ('v',),
           'ema': ('m',)}


class LegacyCheckpointError(ValueError):
  """A legacy checkpoint that does not fit the upgraded program's state."""


def _is_optimizer(d):
  return (isinstance(d, dict) and set(d) == {'target', 'state'}
          and isinstance(d['state'], dict) and 'param_states' in d['state'])


def _find(tree, path=()):
  if _is_optimizer(tree):
    return [path]
  out = []
  if isinstance(tree, dict):
    for k, v in tree.items():
      out += _find(v, path + (k,))
  return out


def _field(param_states, fields, like):
  """The tree of one per-parameter field, shaped like ``like``."""
  if isinstance(like, dict):
    if not isinstance(param_states, dict):
      raise LegacyCheckpointError('the optimizer state does not follow the '
                                  'parameter tree')
    missing = [k for k in like if k not in param_states]
    if missing:
      raise LegacyCheckpointError(
          f'the legacy optimizer state lacks parameters {missing}')
    return {k: _field(param_states[k], fields, v) for k, v in like.items()}
  present = [f for f in fields if isinstance(param_states, dict)
             and f in param_states]
  if not present:
    raise LegacyCheckpointError(
        f'the legacy optimizer has no per-parameter {" or ".join(fields)}: '
        'it does not match the upgraded optimizer (fields '
        f'{sorted(param_states) if isinstance(param_states, dict) else "?"})')
  return param_states[present[0]]


def _same_fields(template, legacy, path):
  """``legacy`` (a per-parameter state tree) checked field by field
  against ``template`` (the upgraded optimizer's)."""
  if not isinstance(template, dict):
    return legacy
  if not isinstance(legacy, dict):
    raise LegacyCheckpointError(
        f'the legacy optimizer state at {path or "<top>"} is a leaf where '
        f'the upgraded optimizer has fields {sorted(template)}')
  if set(template) != set(legacy):
    raise LegacyCheckpointError(
        f'the legacy optimizer state at {path or "<top>"} has fields '
        f'{sorted(legacy)}, the upgraded optimizer {sorted(template)}')
  return {k: _same_fields(v, legacy[k], f'{path}/{k}')
          for k, v in template.items()}


def _opt_state(template, param_states, step):
  """Fills an optax state dict (``to_state_dict`` of ``opt_state``)."""
  if isinstance(template, dict) and set(template) == {'step',
                                                      'param_states'}:
    # a user definition upgraded to optax (legacy_optax.OptimizerState):
    # the legacy per-parameter states as they were, field by field
    return {'step': step, 'param_states': _same_fields(
        template['param_states'], param_states, '')}
  if isinstance(template, dict):
    out = {}
    for k, v in template.items():
      if k in _FIELDS and isinstance(v, dict):
        out[k] = _field(param_states, _FIELDS[k], v)
      elif k == 'count':
        out[k] = step
      elif k in ('hyperparams', 'hyperparams_states'):
        out[k] = v
      else:
        out[k] = _opt_state(v, param_states, step)
    return out
  return template


def _collection(flat):
  tree = {}
  for path, value in sorted(flat.items()):
    node = tree
    for part in (p for p in path.split('/') if p):
      node = node.setdefault(part, {})
    node.update(value)
  return tree


def _is_collection(d):
  return (isinstance(d, dict) and d and all(
      isinstance(k, str) and k.startswith('/') for k in d))


def convert_state_dict(raw, target):
  """A legacy checkpoint's state dict in the layout of ``target``."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  template = serialization.to_state_dict(target)
  raw = dict(raw)
  for path in _find(raw):
    node, tnode = raw, template
    for k in path[:-1]:
      node, tnode = node[k], tnode[k]
    opt = node[path[-1]] if path else raw
    ts = tnode[path[-1]] if path else template
    if not isinstance(ts, dict) or not {'step', 'params', 'opt_state'} <= set(
        ts):
      raise LegacyCheckpointError(
          'the checkpoint holds a legacy Optimizer at '
          f'{"/".join(path) or "<top>"} but the state restored into has no '
          'TrainState there')
    params = opt['target']
    param_states = opt['state']['param_states']
    if isinstance(params, dict) and set(params) == {'params'}:
      params, param_states = params['params'], param_states['params']
    step = np.asarray(opt['state']['step'], np.int32)
    new = dict(ts, params=params, step=int(step),
               opt_state=_opt_state(ts['opt_state'], param_states, step))
    if path:
      node[path[-1]] = new
    else:
      raw = new
  # legacy container fields: nn.Collection model state -> batch_stats dict
  if isinstance(raw, dict) and isinstance(template, dict):
    for k, v in list(raw.items()):
      t = template.get(k)
      if _is_collection(v) and isinstance(t, dict) and 'batch_stats' in t:
        raw[k] = {'batch_stats': _collection(v)}
  return raw


def restore_checkpoint(ckpt_dir, target, step=None, prefix='checkpoint_',
                       parallel=True):
  """``flax.training.checkpoints.restore_checkpoint``, legacy layout too."""
  raw = _checkpoints.restore_checkpoint(ckpt_dir, None, step=step,
                                        prefix=prefix, parallel=parallel)
  if raw is None:
    return target
  if _find(raw):
    return serialization.from_state_dict(target,
                                         convert_state_dict(raw, target))
  # today's layout: restore into the target itself (an Orbax checkpoint
  # read without one drops empty optax states)
  return _checkpoints.restore_checkpoint(ckpt_dir, target, step=step,
                                         prefix=prefix, parallel=parallel)


def save_checkpoint(ckpt_dir, target, step, prefix='checkpoint_', keep=1,
                    overwrite=False, keep_every_n_steps=None):
  """``flax.training.checkpoints.save_checkpoint`` writing the file legacy
  Flax wrote: one msgpack file ``<prefix><step>``, written atomically,
  rather than today's default Orbax directory, so an upgraded program keeps
  its checkpoint files (and the tools and tests that list them)."""
  import flax  # pylint: disable=g-import-not-at-top
  with flax.config.temp_flip_flag('use_orbax_checkpointing', False):
    return _checkpoints.save_checkpoint(
        ckpt_dir, target, step, prefix=prefix, keep=keep, overwrite=overwrite,
        keep_every_n_steps=keep_every_n_steps)


# --- nn.stochastic / nn.make_rng at program level --------------------------
#
# ``flaxlegacy upgrade`` passes ``rngs={'dropout': rng}`` to the model calls
# it sees inside a ``with nn.stochastic(rng):`` block; keys that program
# code itself draws with ``nn.make_rng()`` (possibly in a function called
# from the block) come from these two plain-JAX functions, with legacy's
# numbering: the n-th key of a block is ``fold_in(rng, n)``, n = 1, 2, ...

_FRAMES = []


class _Frame:

  def __init__(self, rng):
    self.rng = rng
    self.count = 0


class stochastic:  # pylint: disable=invalid-name
  """``with stochastic(rng):`` -- a block in which ``make_rng()`` draws."""

  def __init__(self, rng):
    self._frame = _Frame(rng)

  def __enter__(self):
    _FRAMES.append(self._frame)
    return self._frame

  def __exit__(self, *exc):
    _FRAMES.remove(self._frame)
    return False


def is_stochastic():
  return bool(_FRAMES)


def make_rng():
  """The next key of the innermost ``stochastic`` block."""
  import jax  # pylint: disable=g-import-not-at-top
  if not _FRAMES:
    raise ValueError('Use the `nn.stochastic()` context manager to enable '
                     'stochastic computations.')
  frame = _FRAMES[-1]
  frame.count += 1
  return jax.random.fold_in(frame.rng, frame.count)


def hashable(key):
  """A 0-d ``jax.Array`` as the NumPy scalar a 2020 ``DeviceArray`` yielded.

  Iterating a legacy ``DeviceArray`` gave NumPy scalars, which are hashable
  and worked as dict keys; iterating a ``jax.Array`` gives 0-d arrays, which
  are not.  The upgrade wraps dict lookups by a loop variable in this.
  Anything else (and a tracer, which no dict lookup accepts either) is
  returned unchanged.
  """
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  if (isinstance(key, jax.Array) and not isinstance(key, jax.core.Tracer)
      and key.ndim == 0):
    return np.asarray(key)[()]
  return key


# --- an nn.Model that goes where the upgrade cannot name its module -------
#
# ``flaxlegacy upgrade`` makes a legacy ``nn.Model(M, params)`` its
# parameters where every use of the model can be written ``M().apply`` (the
# model stays where the program builds and calls it).  A model that goes
# further -- kept on ``self``, handed to functions that only call it,
# optimized, synced with ``replace`` -- becomes a ``Model``: the linen module
# (a class, a ``functools.partial`` of one, or an instance) and its
# parameters, a pytree whose leaves are the parameters, called the way the
# legacy model was called.


def _model_module_class(module):
  import functools  # pylint: disable=g-import-not-at-top
  cls = module
  while isinstance(cls, (functools.partial, partial_module)):
    cls = cls.func
  return cls if isinstance(cls, type) else type(cls)


class partial_module:  # pylint: disable=invalid-name
  """Legacy ``X.partial(**kwargs)`` of a linen module class known only at
  run time (``X`` one of several classes of different fields).  A legacy
  partial bound hyper-parameters and call arguments alike; here the
  keywords that are fields of the class go to its constructor, and the
  others are ``__call__`` keywords that every call through these helpers
  gets (``Model``, ``init_module*``, ``create_module*``), a call's own
  keywords overriding them as legacy's did.  Calling it builds the module
  (``partial_module(X, k=v)(**fields)``), as ``functools.partial`` does."""

  def __init__(self, module, /, **kwargs):
    self.func = module
    self.keywords, self.call_kwargs = _model_split(module, kwargs)

  def __call__(self, **ctor):
    return _model_instance(self.func, {**self.keywords, **ctor})

  def __repr__(self):
    return (f'partial_module({self.func!r}, fields={self.keywords!r}, '
            f'call={self.call_kwargs!r})')


def _model_split(module, kwargs):
  """(constructor keywords, ``__call__`` keywords) of a legacy call's
  keywords: a linen class takes its hyper-parameters as fields (legacy took
  them at every call, overriding its ``.partial`` keywords)."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  cls = _model_module_class(module)
  fields = {f.name for f in dataclasses.fields(cls) if f.init} - {'parent'}
  ctor = {k: v for k, v in kwargs.items() if k in fields}
  call = {k: v for k, v in kwargs.items() if k not in fields}
  if isinstance(module, partial_module):
    call = {**module.call_kwargs, **call}
  return ctor, call


def _model_instance(module, ctor):
  if isinstance(module, type) or not hasattr(module, 'clone'):
    return module(**ctor)  # a class or a functools.partial of one
  return module.clone(**ctor) if ctor else module


def _stochastic_rngs(kwargs):
  """A legacy model called inside ``with nn.stochastic(rng):`` drew its
  random numbers from ``rng``: the call gets ``rngs={'dropout': rng}``, as
  the upgrade writes for the model calls it sees in such a block."""
  if _FRAMES and 'rngs' not in kwargs:
    return dict(kwargs, rngs={'dropout': _FRAMES[-1].rng})
  return kwargs


def _pytree_class(cls):
  import jax  # pylint: disable=g-import-not-at-top
  return jax.tree_util.register_pytree_node_class(cls)


def _model_state_dict(model):
  return serialization.to_state_dict(model.params)


def _model_from_state_dict(model, state):
  return model.replace(
      params=serialization.from_state_dict(model.params, state))


def _serializable_model(cls):
  # a checkpoint of a Model (or of a TrainState over one) holds its
  # parameters as a parameter dict would: a legacy optimizer's target (its
  # model's params: restore_checkpoint) restores into it
  serialization.register_serialization_state(
      cls, _model_state_dict, _model_from_state_dict)
  return cls


def _named(module):
  """``module``, answering ``module.__name__`` as legacy's did: legacy
  ``X.partial(...)`` was a subclass of X of the same name (``model.module.
  __name__`` in logging code), a ``functools.partial`` / ``partial_module``
  of X has no name of its own."""
  if not isinstance(module, type) and not hasattr(module, '__name__'):
    try:
      module.__name__ = _model_module_class(module).__name__
    except (AttributeError, TypeError):  # an instance that takes none
      pass
  return module


@_serializable_model
@_pytree_class
class Model:
  """A linen module with its parameters, used as legacy ``nn.Model`` was.

  ``model(*inputs, **kwargs)`` applies the module (keywords that are fields
  of its class go to its constructor, the rest to ``__call__``);
  ``model.params``, ``model.module``, ``model.replace(params=...)`` as
  legacy.  A pytree whose leaves are the parameters (the module is static),
  so it passes through ``jax.jit`` / ``jax.grad`` / optax as the legacy
  model did; an optimizer of it is a ``TrainState`` whose ``params`` is the
  Model and whose ``apply_fn`` is ``apply_model``.
  """

  def __init__(self, module, params):
    self.module = _named(module)
    self.params = params

  def __call__(self, *args, **kwargs):
    return self._apply({}, args, kwargs)

  def _apply(self, collections, args, kwargs):
    ctor, call = _model_split(self.module, kwargs)
    instance = _model_instance(self.module, ctor)
    if collections or 'mutable' in call:
      # collections given with the parameters (apply_model: a cache, a
      # state), or the caller's own mutable=: applied as given
      return instance.apply({'params': self.params, **collections}, *args,
                            **_stochastic_rngs(call))
    # a plain call: the innermost run-time nn.stateful block's collections
    return _stateful_apply(instance, self.params, args,
                           _stochastic_rngs(call))

  def __getattr__(self, name):
    # model.encode(x): a method of the module (a legacy module_method),
    # applied with the parameters
    if name.startswith('__') or name in ('module', 'params'):
      raise AttributeError(name)
    method = getattr(_model_module_class(self.module), name, None)
    if not callable(method):
      raise AttributeError(f'Model has no attribute {name!r} (and its '
                           f'module class no method {name!r})')

    def apply_method(*args, **kwargs):
      ctor, call = _model_split(self.module, kwargs)
      return _stateful_apply(_model_instance(self.module, ctor), self.params,
                             args, dict(_stochastic_rngs(call), method=name))
    return apply_method

  def replace(self, **updates):
    unknown = set(updates) - {'module', 'params'}
    if unknown:
      raise TypeError(f'Model.replace: no field(s) {sorted(unknown)}')
    return Model(updates.get('module', self.module),
                 updates.get('params', self.params))

  def __contains__(self, key):
    # TrainState asks whether a gradient holds the overwrite-with-gradient
    # collection; a model's gradient is a Model, which holds none
    del key
    return False

  def __repr__(self):
    return f'Model(module={self.module!r}, params=...)'

  def tree_flatten(self):
    return (self.params,), self.module

  @classmethod
  def tree_unflatten(cls, module, children):
    return cls(module, children[0])


def apply_model(variables, /, *args, **kwargs):
  """``TrainState.apply_fn`` of a TrainState whose params are a ``Model``:
  ``state.apply_fn({'params': state.params}, x)`` calls the model.  The
  other collections of ``variables`` (a legacy ``nn.stateful`` state, an
  attention cache) go with the parameters, and ``mutable=`` / ``rngs=``
  to ``apply``: ``apply_model({'params': model, **cache}, x, cache=True,
  mutable=['cache'])`` is the legacy call in a ``cache.mutate()`` block."""
  model = variables['params']
  if not isinstance(model, Model):
    raise TypeError('apply_model: variables[\'params\'] is a '
                    f'{type(model).__name__}, not a legacy_model.Model (a '
                    'model that carries its module)')
  return model._apply(  # pylint: disable=protected-access
      {k: v for k, v in variables.items() if k != 'params'}, args, kwargs)


def init_module(module, rng, /, *args, **kwargs):
  """Legacy ``module.init(rng, *inputs, **kwargs)`` of a linen module class
  (or ``functools.partial`` of one) known only at run time: ``(outputs,
  params)``, the keywords split between fields and ``__call__`` by the
  class's fields.  Inside a ``stateful`` block the module's other
  collections (batch statistics) go to the block's state, as legacy
  ``init`` inside ``nn.stateful()`` wrote them to its collection."""
  ctor, call = _model_split(module, kwargs)
  rngs = rng
  if _FRAMES and 'rngs' not in call:
    # legacy init inside ``nn.stochastic(key)`` drew its dropout keys there
    rngs = {'params': rng, 'dropout': _FRAMES[-1].rng}
  outputs, variables = _model_instance(module, ctor).init_with_output(
      rngs, *args, **call)
  variables = dict(variables)
  params = variables.pop('params', {})
  frame = _STATE_FRAMES[-1] if _STATE_FRAMES else None
  if frame is not None and frame.mutable:
    frame.state.update(variables)
  return outputs, params


def compute_gradient(loss_fn, params):
  """Legacy ``optimizer.compute_gradient(loss_fn)`` of an optimizer whose
  target is ``params`` (a TrainState's ``params``): ``(loss, grad)`` where
  ``loss_fn`` returns its loss alone (an array), else ``(loss, aux, grad)``
  of the ``(loss, aux)`` it returns -- legacy chose by that return value,
  so the rewrite cannot choose in the source."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  bare = []  # set while value_and_grad traces loss_fn, read after it

  def loss_and_aux(p):
    out = loss_fn(p)
    if isinstance(out, (jax.Array, np.ndarray, np.generic)):
      bare.append(True)
      return out, None
    return out

  (loss, aux), grad = jax.value_and_grad(loss_and_aux, has_aux=True)(params)
  return (loss, grad) if bare else (loss, aux, grad)


def module_call(module):
  """Legacy ``model.module.call`` of a model whose module is known only at
  run time: ``f(params, *inputs, **kwargs)`` applies ``module`` with
  ``params`` (the keywords split between fields and ``__call__`` by the
  class's fields), in the innermost ``stateful`` block's collections."""

  def call(params, *args, **kwargs):
    ctor, rest = _model_split(module, kwargs)
    return _stateful_apply(_model_instance(module, ctor), params, args,
                           _stochastic_rngs(rest))
  return call


def _shape_inputs(input_specs):
  """Zeros of legacy ``init_by_shape`` input specs (a shape, or a
  ``(shape, dtype)`` pair; float32 where no dtype is given)."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  out = []
  for spec in input_specs:
    if (isinstance(spec, tuple) and len(spec) == 2
        and isinstance(spec[0], (tuple, list))):
      shape, dtype = spec
    else:
      shape, dtype = spec, jnp.float32
    out.append(jnp.zeros(tuple(shape), dtype))
  return out


def _output_shapes(outputs):
  """Legacy ``init_by_shape`` gave the outputs' shapes, not their values."""
  import jax  # pylint: disable=g-import-not-at-top
  return jax.tree_util.tree_map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype)
      if hasattr(x, 'shape') and hasattr(x, 'dtype') else x, outputs)


def init_module_by_shape(module, rng, input_specs, /, *args, **kwargs):
  """Legacy ``module.init_by_shape(rng, input_specs, ...)`` of a module
  known only at run time: ``(output shapes, params)``."""
  outputs, params = init_module(module, rng, *_shape_inputs(input_specs),
                                *args, **kwargs)
  return _output_shapes(outputs), params


def create_module(module, rng, /, *args, **kwargs):
  """Legacy ``module.create(rng, *inputs, ...)`` of a module known only at
  run time: ``(outputs, Model(module, params))``."""
  outputs, params = init_module(module, rng, *args, **kwargs)
  return outputs, Model(module, params)


def create_module_by_shape(module, rng, input_specs, /, *args, **kwargs):
  """Legacy ``module.create_by_shape(rng, input_specs, ...)`` of a module
  known only at run time: ``(output shapes, Model(module, params))``."""
  outputs, params = init_module_by_shape(module, rng, input_specs, *args,
                                         **kwargs)
  return outputs, Model(module, params)


# --- nn.stateful around models that carry their module ---------------------
#
# A legacy ``with nn.stateful(state) as new_state:`` block gave every module
# called in it (however deep) the collections of ``state``; ``new_state``
# received what they wrote.  Where the upgrade cannot thread the state
# through ``apply(..., mutable=...)`` itself (the model carries a module
# known only at run time), the block becomes ``with stateful(state) as
# new_state:``: a ``Model`` called (or a module initialised) inside it
# applies with these collections and writes the ones it changes back.  The
# state is a dict of collections (``{'batch_stats': {...}}``), as the
# upgraded program's other state is.

_STATE_FRAMES = []


class stateful:  # pylint: disable=invalid-name
  """``with stateful(state=None, mutable=True) as new_state:``.

  ``new_state`` is a new dict holding ``state``'s collections, updated in
  place by each call of a ``Model`` in the block (``state`` is left as it
  was); ``mutable=False``: the block reads ``state`` and writes nothing
  (``new_state`` is ``state``).
  """

  def __init__(self, state=None, mutable=True):
    self._given = {} if state is None else state
    self.mutable = mutable
    self.state = None

  def __enter__(self):
    self.state = dict(self._given) if self.mutable else self._given
    _STATE_FRAMES.append(self)
    return self.state

  def __exit__(self, *exc):
    _STATE_FRAMES.remove(self)
    return False


def collection_dict(state):
  """``state.as_dict()`` of a legacy ``nn.Collection``, upgraded.

  ``state`` is what an upgraded ``stateful`` block holds: a dict of
  collections in linen's nested layout (``{'batch_stats': {'block':
  {'bn': {'mean': m}}}}``).  The result is legacy's layout: one entry per
  module that holds state, keyed by the module's path from the root
  (``'/'`` for the root itself), each a dict of that module's values
  (``{'/block/bn': {'mean': m}}``).  The dict itself is new (legacy's
  ``as_dict()`` was a copy of the collection's dict), but each module's
  entry writes through to ``state``, as legacy's entries were the
  collection's own dicts: ``collection_dict(s)['/'].update(mean=m)`` changes
  ``s`` (where ``state`` holds plain dicts; a frozen one is not written)."""
  if state is None:
    return {}
  if not hasattr(state, 'items'):
    raise TypeError('collection_dict: the state of a legacy collection is a '
                    f'dict of collections, not a {type(state).__name__}')
  names = [k for k, v in state.items() if v is not None]
  if len(names) > 1:
    raise ValueError('collection_dict: a legacy collection is one linen '
                     'collection; this state holds '
                     f'{sorted(names)}')
  out = {}

  def walk(node, path):
    for key, value in node.items():
      if hasattr(value, 'items'):
        walk(value, path + (key,))
      else:
        where = '/' + '/'.join(path)
        if where not in out:
          out[where] = ModuleValues(node)
        dict.__setitem__(out[where], key, value)

  for key in names:
    walk(state[key], ())
  return out


@_pytree_class
class ModuleValues(dict):
  """One module's values in legacy's flat layout of a collection
  (``collection_dict``): a dict that writes what is set in it through to
  the module's dict in the nested state too (``node``, where it is a plain
  dict).  A pytree as a dict is (a new dict when rebuilt)."""

  def __init__(self, node, values=()):
    super().__init__(values)
    self._node = node if isinstance(node, dict) else None

  def __setitem__(self, key, value):
    super().__setitem__(key, value)
    if self._node is not None:
      self._node[key] = value

  def __delitem__(self, key):
    super().__delitem__(key)
    if self._node is not None:
      del self._node[key]

  def update(self, *args, **kwargs):
    for key, value in dict(*args, **kwargs).items():
      self[key] = value

  def setdefault(self, key, default=None):
    if key not in self:
      self[key] = default
    return self[key]

  def pop(self, key, *default):
    if key not in self:
      if default:
        return default[0]
      raise KeyError(key)
    value = self[key]
    del self[key]
    return value

  def popitem(self):
    key = next(reversed(self))
    return key, self.pop(key)

  def clear(self):
    for key in list(self):
      del self[key]

  def tree_flatten(self):
    keys = sorted(self)
    return [self[k] for k in keys], tuple(keys)

  @classmethod
  def tree_unflatten(cls, keys, children):
    return dict(zip(keys, children))


def _copy_nested(node):
  if hasattr(node, 'items'):
    return {k: _copy_nested(v) for k, v in node.items()}
  return node


class collection_copy:  # pylint: disable=invalid-name
  """``with coll.mutate() as new:`` of a legacy ``nn.Collection``, upgraded
  (``coll`` a dict of collections, ``{'batch_stats': {...}}``): ``new`` is a
  copy of ``coll`` with dicts of its own at every level (the arrays
  shared), so what the block writes into it (through
  ``collection_dict(new)``'s entries) leaves ``coll`` as it was -- legacy's
  mutable clone of the collection."""

  def __init__(self, state):
    self._state = state

  def __enter__(self):
    return {} if self._state is None else _copy_nested(self._state)

  def __exit__(self, *exc):
    return False


def _stateful_apply(instance, params, args, kwargs):
  """``instance.apply`` with ``params`` and the innermost ``stateful``
  block's collections (written back when the block is mutable)."""
  frame = _STATE_FRAMES[-1] if _STATE_FRAMES else None
  if frame is None or not frame.state and not frame.mutable:
    return instance.apply({'params': params}, *args, **kwargs)
  from flax.core import DenyList  # pylint: disable=g-import-not-at-top
  variables = {'params': params, **frame.state}
  if not frame.mutable:
    return instance.apply(variables, *args, **kwargs)
  outputs, changed = instance.apply(variables, *args,
                                    mutable=DenyList('params'), **kwargs)
  frame.state.update(changed)
  return outputs


def legacy_known_module(value, known, where):
  """``value`` (a hyper-parameter holding a module class, or a partial of
  one), checked to be one of ``known`` when a call of it runs.

  The upgrade named the call's positional hyper-parameters by the
  signature of the classes the codebase gives the parameter (``known``:
  they name those positions alike); a class it could not see (a caller's,
  a configuration's) may name them otherwise, so it raises instead of
  running with the wrong names.
  """
  import functools  # pylint: disable=g-import-not-at-top
  base = value
  while isinstance(base, functools.partial):
    base = base.func
  if any(base is k for k in known):
    return value
  names = ', '.join(getattr(k, '__name__', repr(k)) for k in known)
  raise NotImplementedError(
      f'{where} holds {value!r}: the upgrade from legacy Flax named the '
      f'positional hyper-parameters of its call by the signature of {names}; '
      'pass them by keyword, or port this call by hand')


# Legacy auto-names drawn where a plain function or a lambda builds a
# submodule.  Legacy Flax named an unnamed submodule ``<Class>_<n>`` from
# one counter of the module whose ``apply`` was running when it was built,
# also where a plain function (a ``features(x)`` helper) or a lambda made
# elsewhere (an activation handed to a block) built it.  The upgrade marks
# each compact method whose run can reach such code with
# ``@autoname_frame`` (a fresh counter per call, as legacy's per-apply
# frame), and those bodies, functions and lambdas name the submodule
# ``f'{Class}_{next(autoname_counter())}'``: the counter of the method
# running at that moment.  A frame per call, not per instance or global:
# init, apply, jax.jit of apply and linen's re-tracing each give the same
# names.

_AUTONAME_FRAMES = []


def autoname_frame(method):
  """Decorates a compact method: each call gets a fresh auto-name counter,
  which ``autoname_counter()`` returns while the call runs."""
  import functools  # pylint: disable=g-import-not-at-top
  import itertools  # pylint: disable=g-import-not-at-top

  @functools.wraps(method)
  def counted(self, *args, **kwargs):
    _AUTONAME_FRAMES.append((self, itertools.count()))
    try:
      return method(self, *args, **kwargs)
    finally:
      _AUTONAME_FRAMES.pop()

  return counted


def _running_module():
  """The linen module whose method runs now, or None where this flax
  does not say."""
  try:
    from flax.linen import module as linen_module  # pylint: disable=g-import-not-at-top
    stack = linen_module._context.module_stack  # pylint: disable=protected-access
  except (ImportError, AttributeError):
    return None
  return stack[-1] if stack else None


def autoname_counter():
  """The auto-name counter of the ``@autoname_frame`` method running now.

  Raises where none runs, or where the module running now is not the one
  whose frame is innermost (a method the upgrade did not mark builds the
  submodule): its legacy name is not known there, so no name is guessed.
  """
  running = _running_module()
  if _AUTONAME_FRAMES:
    owner, counter = _AUTONAME_FRAMES[-1]
    if running is None or running is owner:
      return counter
  where = (f'in {type(running).__name__}' if running is not None
           else 'outside any module')
  raise ValueError(
      f'a legacy auto-named submodule is built {where}, whose method is not '
      'marked @autoname_frame: its legacy name is not known here (name it, '
      'or mark the compact method that runs this code)')
