"""Legacy ``flax.optim.base``: OptimizerState, OptimizerDef, Optimizer.

The legacy contract (spec legacy-optim.md §2) in one place:

* ``OptimizerDef`` is a plain class holding ``hyper_params``; its
  ``apply_gradient(hyper_params, params, state, grads)`` returns
  ``(new_params, OptimizerState(step + 1, new_param_states))`` where
  ``param_states`` mirrors the params tree, one per-parameter state per leaf.
  User-written definitions override only ``init_param_state`` and
  ``apply_param_gradient`` and get the per-leaf loop below, called with
  legacy's exact signature and argument order.
* ``OptaxOptimizerDef`` is the base of every built-in optimizer: its update is
  an optax ``GradientTransformation`` applied to the whole tree at once, and
  only the state *layout* is legacy's (``to_optax_state`` /
  ``from_optax_state`` convert between the two).  So under ``jax.jit`` a
  legacy ``apply_gradient`` lowers to the optax arithmetic, with no per-leaf
  Python loop left in the program.
* ``Optimizer`` is a ``flax.struct.PyTreeNode`` (meta ``optimizer_def``, data
  ``state`` and ``target``) serialized as ``{'target', 'state'}``.
"""

import dataclasses
from typing import Any
import warnings

from flax import jax_utils
from flax import serialization
from flax import struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from flaxlegacy.optim import _traversal
from flaxlegacy.optim._traversal import ModelParamTraversal  # noqa: F401  (legacy re-export)
from flaxlegacy.optim._traversal import _sorted_items  # noqa: F401  (legacy private name)
# Legacy private name (up to v0.3.4): the params dict of a Model, or an
# unfrozen copy of a dict / FrozenDict; ValueError for anything else.
from flaxlegacy.optim._traversal import _params_dict as _get_params_dict  # noqa: F401

# --------------------------------------------------------------------------
# OptimizerState
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class OptimizerState:
  """``(step, param_states)``: a frozen dataclass like legacy's
  ``struct.dataclass`` (positional / keyword construction, ``replace``,
  equality, state dict ``{'step', 'param_states'}``).

  Only its pytree registration differs, for dispatch speed: the children
  are ``step`` followed by the leaves of ``param_states`` in legacy order,
  and the structure of ``param_states`` is kept as aux data.  Unflattening
  (every jit / pmap output) therefore builds no per-parameter state objects;
  ``param_states`` is rebuilt on first access (inside jit that is trace
  time only).  A Momentum state of 160 parameters otherwise costs 160
  Python dataclass constructions on every call of a jitted train step.
  """
  step: Any
  param_states: Any

  def replace(self, **updates):
    return dataclasses.replace(self, **updates)

  def __getattr__(self, name):
    # Only reached when normal lookup fails: a state unflattened by JAX
    # whose param_states has not been rebuilt yet.
    if name == 'param_states':
      lazy = self.__dict__.get('_lazy')
      if lazy is not None:
        treedef, children = lazy
        value = treedef.unflatten(children[1:])
        object.__setattr__(self, 'param_states', value)
        return value
    raise AttributeError(
        f'{type(self).__name__!r} object has no attribute {name!r}')


def _state_flatten(state):
  d = state.__dict__
  if 'param_states' not in d:
    treedef, children = d['_lazy']
    return children, treedef
  leaves, treedef = jax.tree_util.tree_flatten(d['param_states'])
  return (d['step'], *leaves), treedef


def _state_unflatten(treedef, children):
  state = object.__new__(OptimizerState)
  children = tuple(children)
  object.__setattr__(state, 'step', children[0])
  object.__setattr__(state, '_lazy', (treedef, children))
  return state


jax.tree_util.register_pytree_node(OptimizerState, _state_flatten,
                                   _state_unflatten)


def _state_to_state_dict(state):
  return {'step': serialization.to_state_dict(state.step),
          'param_states': serialization.to_state_dict(state.param_states)}


def _state_from_state_dict(state, state_dict):
  for name in ('step', 'param_states'):
    if name not in state_dict:
      raise ValueError(f'Missing field {name} in state dict while restoring '
                       'an instance of OptimizerState, at path '
                       f'{serialization.current_path()}')
  unknown = set(state_dict) - {'step', 'param_states'}
  if unknown:
    raise ValueError(f'Unknown field(s) "{",".join(sorted(unknown))}" in '
                     'state dict while restoring an instance of '
                     f'OptimizerState at path {serialization.current_path()}')
  return state.replace(
      step=serialization.from_state_dict(state.step, state_dict['step'],
                                         name='step'),
      param_states=serialization.from_state_dict(
          state.param_states, state_dict['param_states'],
          name='param_states'))


serialization.register_serialization_state(
    OptimizerState, _state_to_state_dict, _state_from_state_dict)


def _initial_step():
  # Decision D3: int32 array (0.3.0+); equals the int 0 of v0.2 tests.
  return jnp.asarray(0, dtype=jnp.int32)


def _as_array(x):
  """A JAX array for a NumPy / Python leaf; tracers and arrays pass through.

  Legacy rules mixed jnp functions into every update, so their results were
  float32 even for float64 NumPy inputs; optax's updates use plain Python
  operators, which would keep NumPy float64 (legacy tests compare exact
  float32 values such as Adam's ``2.41``).
  """
  return x if isinstance(x, jax.Array) else jnp.asarray(x)


def _short(text, limit=240):
  text = str(text)
  return text if len(text) <= limit else text[:limit] + '...'


def _flatten_like(treedef, tree, what):
  """``treedef.flatten_up_to(tree)`` with an error that names the problem."""
  try:
    return treedef.flatten_up_to(tree)
  except (ValueError, TypeError) as e:
    got = jax.tree_util.tree_structure(tree)
    raise ValueError(
        f'The {what} tree does not match the optimizer target '
        f'({treedef.num_leaves} leaves): expected structure '
        f'{_short(treedef)}, got {type(tree).__name__} with '
        f'{got.num_leaves} leaves, structure {_short(got)}. '
        f'JAX: {_short(str(e).splitlines()[0] if str(e) else e)}') from e


def _replace_hyper_params(owner, hp, overrides):
  """``hp.replace(**overrides)``; unknown names raise a TypeError naming them."""
  try:
    return hp.replace(**overrides)
  except TypeError as e:
    if dataclasses.is_dataclass(hp):
      known = [f.name for f in dataclasses.fields(hp)]
      unknown = sorted(set(overrides) - set(known))
      if unknown:
        raise TypeError(
            f'{type(owner).__name__} has no hyper-parameter(s) '
            f'{", ".join(map(repr, unknown))}; its hyper-parameters are: '
            f'{", ".join(known)}') from e
    raise


# --------------------------------------------------------------------------
# OptimizerDef
# --------------------------------------------------------------------------


class OptimizerDef:
  """Base class of an optimizer definition (legacy ``flax.optim``).

  Subclasses written in the legacy style implement ``init_param_state`` and
  ``apply_param_gradient``; everything else is provided here.
  """

  def __init__(self, hyper_params):
    self.hyper_params = hyper_params

  # -- the two per-parameter hooks of legacy-style definitions -------------

  def apply_param_gradient(self, step, hyper_params, param, state, grad):
    """Returns ``(new_param, new_state)`` for one parameter leaf."""
    raise NotImplementedError()

  def init_param_state(self, param):
    """Returns the initial per-parameter state of one parameter leaf."""
    raise NotImplementedError()

  # -- tree-level API ------------------------------------------------------

  def apply_gradient(self, hyper_params, params, state, grads):
    """Applies ``grads`` leaf by leaf through ``apply_param_gradient``."""
    step = state.step
    params_flat, treedef = jax.tree_util.tree_flatten(params)
    states_flat = _flatten_like(treedef, state.param_states,
                                'optimizer param_states')
    grads_flat = _flatten_like(treedef, grads, 'gradient')
    out = [self.apply_param_gradient(step, hyper_params, p, s, g)
           for p, s, g in zip(params_flat, states_flat, grads_flat)]
    new_params_flat, new_states_flat = list(zip(*out)) if out else ((), ())
    new_params = jax.tree_util.tree_unflatten(treedef, new_params_flat)
    new_param_states = jax.tree_util.tree_unflatten(treedef, new_states_flat)
    return new_params, OptimizerState(step + 1, new_param_states)

  def init_state(self, params):
    param_states = jax.tree_util.tree_map(self.init_param_state, params)
    return OptimizerState(_initial_step(), param_states)

  def update_hyper_params(self, **hyper_param_overrides):
    """The hyper-parameters of one step: ``hyper_params=`` replaces them all,
    other keywords replace single fields."""
    hp = hyper_param_overrides.pop('hyper_params', self.hyper_params)
    if hyper_param_overrides:
      hp = _replace_hyper_params(self, hp, hyper_param_overrides)
    return hp

  def create(self, target, focus=None):
    """Returns an ``Optimizer`` for ``target`` (only ``focus`` if given)."""
    opt_def = self
    if focus:
      opt_def = MultiOptimizer((focus, opt_def))
    state = opt_def.init_state(target)
    return Optimizer(opt_def, state, target)

  def state_dict(self, target, state):
    return serialization.to_state_dict({
        'target': serialization.to_state_dict(target),
        'state': serialization.to_state_dict(state),
    })

  def restore_state(self, opt_target, opt_state, state_dict):
    """Restores target and state; the templates give structure only."""
    opt_target = serialization.from_state_dict(opt_target,
                                               state_dict['target'])
    opt_state = serialization.from_state_dict(opt_state, state_dict['state'])
    return opt_target, opt_state

  # -- beyond legacy: the definition as an optax transformation ------------

  def as_optax(self, **hyper_param_overrides):
    """This optimizer as an ``optax.GradientTransformation``.

    For a definition that is not optax-backed (a user-written legacy
    definition, WeightNorm, MultiOptimizer) the transformation's state is
    the legacy ``OptimizerState`` and its update is ``new_params - params``,
    so ``optax.apply_updates`` reproduces the legacy parameters up to one
    rounding of that difference.
    """
    hp = self.update_hyper_params(**hyper_param_overrides)

    def init_fn(params):
      return self.init_state(params)

    def update_fn(updates, state, params=None):
      if params is None:
        raise ValueError(f'{type(self).__name__}.as_optax(): update() needs '
                         'the params argument')
      new_params, new_state = self.apply_gradient(hp, params, state, updates)
      return jax.tree_util.tree_map(lambda n, p: n - p, new_params,
                                    params), new_state

    return optax.GradientTransformation(init_fn, update_fn)

  def to_optax_state(self, state, params):
    """Converts a legacy ``OptimizerState`` to the state of ``as_optax()``."""
    del params
    return state

  def from_optax_state(self, opt_state, params, step=None):
    """Converts a state of ``as_optax()`` back to a legacy OptimizerState."""
    del params
    if step is not None:
      opt_state = opt_state.replace(step=step)
    return opt_state


# --------------------------------------------------------------------------
# Optax-backed definitions (every built-in optimizer)
# --------------------------------------------------------------------------


class OptaxOptimizerDef(OptimizerDef):
  """An optimizer whose update is an optax transformation.

  Subclasses define

  * ``param_state_cls``: the legacy per-parameter state dataclass (``None``
    for a stateless rule such as GradientDescent, whose per-leaf state is
    ``()``);
  * ``transform(hyper_params)``: the optax ``GradientTransformation`` with
    the legacy numerics for those hyper-parameters (built per call, so per
    call overrides and traced learning rates just work);
  * ``state_to_optax(hyper_params, count, fields)`` and
    ``state_from_optax(hyper_params, opt_state, fields)``: the mapping between
    the optax state of ``transform`` and the legacy per-parameter fields,
    given as a dict ``field name -> tree shaped like the params``.
  """

  param_state_cls = None

  # Which NumPy / Python inputs become JAX arrays before the update (only
  # eager calls see such inputs; under jit everything is traced).  Legacy
  # rules evaluated NumPy inputs with NumPy float64 arithmetic except where a
  # jnp function intervened, and legacy tests compare exact values produced
  # that way: Momentum and GradientDescent stayed NumPy throughout, Adam and
  # AdaBelief first squared the gradient with ``lax.square``, the others
  # went through jnp at once.
  host_inputs_to_jax = ('params', 'grads', 'states')

  # -- to be provided by subclasses ----------------------------------------

  def transform(self, hyper_params):
    raise NotImplementedError()

  def state_to_optax(self, hyper_params, count, fields):
    raise NotImplementedError()

  def state_from_optax(self, hyper_params, opt_state, fields):
    raise NotImplementedError()

  # -- the legacy state layout <-> field trees ------------------------------

  def _field_names(self):
    cls = self.param_state_cls
    return () if cls is None else tuple(f.name for f in dataclasses.fields(cls))

  def _split(self, treedef, param_states):
    """Per-leaf state dataclasses -> {field: tree}."""
    names = self._field_names()
    if not names:
      return {}
    leaf_states = _flatten_like(treedef, param_states,
                                'optimizer param_states')
    return {n: treedef.unflatten([getattr(s, n) for s in leaf_states])
            for n in names}

  def _join(self, treedef, fields):
    """{field: tree} -> per-leaf state dataclasses."""
    names = self._field_names()
    if not names:
      return treedef.unflatten([()] * treedef.num_leaves)
    columns = [[None] * treedef.num_leaves if fields[n] is None
               else treedef.flatten_up_to(fields[n]) for n in names]
    cls = self.param_state_cls
    return treedef.unflatten([cls(*vals) for vals in zip(*columns)])

  def _check_learning_rate(self, hyper_params):
    assert hyper_params.learning_rate is not None, 'no learning rate provided.'

  # -- OptimizerDef API ----------------------------------------------------
  #
  # A user class derived from a built-in optimizer that overrides a
  # per-parameter hook (as 2020 code did to tweak a rule) gets legacy's
  # per-leaf loop, so its override is what runs; its super() calls reach
  # the optax rule for that one leaf.

  def _overrides(self, hook):
    return getattr(type(self), hook) is not getattr(OptaxOptimizerDef, hook)

  def init_state(self, params):
    if self._overrides('init_param_state'):
      return OptimizerDef.init_state(self, params)
    return self._optax_init(params)

  def init_param_state(self, param):
    return self._optax_init(param).param_states

  def apply_gradient(self, hyper_params, params, state, grads):
    if self._overrides('apply_param_gradient'):
      return OptimizerDef.apply_gradient(self, hyper_params, params, state,
                                         grads)
    return self._optax_apply(hyper_params, params, state, grads)

  def apply_param_gradient(self, step, hyper_params, param, state, grad):
    new_param, new_state = self._optax_apply(
        hyper_params, param, OptimizerState(step, state), grad)
    return new_param, new_state.param_states

  def _optax_init(self, params):
    params = jax.tree_util.tree_map(_as_array, params)
    treedef = jax.tree_util.tree_structure(params)
    hp = self.hyper_params
    opt_state = self.transform(hp).init(params)
    fields = self.state_from_optax(hp, opt_state, None)
    return OptimizerState(_initial_step(), self._join(treedef, fields))

  def _optax_apply(self, hyper_params, params, state, grads):
    """The whole tree through ``transform(hyper_params)`` at once."""
    self._check_learning_rate(hyper_params)
    params_flat, treedef = jax.tree_util.tree_flatten(params)
    grads_flat = _flatten_like(treedef, grads, 'gradient')
    to_jax = self.host_inputs_to_jax
    if 'params' in to_jax:
      params_flat = [_as_array(p) for p in params_flat]
    if 'grads' in to_jax:
      grads_flat = [_as_array(g) for g in grads_flat]
    params = treedef.unflatten(params_flat)
    grads = treedef.unflatten(grads_flat)
    fields = self._split(treedef, state.param_states)
    if 'states' in to_jax:
      fields = {n: jax.tree_util.tree_map(_as_array, t)
                for n, t in fields.items()}
    step = state.step
    count = jnp.asarray(step, dtype=jnp.int32)
    tx = self.transform(hyper_params)
    opt_state = self.state_to_optax(hyper_params, count, fields)
    updates, new_opt_state = tx.update(grads, opt_state, params)
    new_params = optax.apply_updates(params, updates)
    new_fields = self.state_from_optax(hyper_params, new_opt_state, fields)
    return new_params, OptimizerState(step + 1,
                                      self._join(treedef, new_fields))

  # -- beyond legacy -------------------------------------------------------

  def as_optax(self, **hyper_param_overrides):
    """The optax transformation computing this optimizer's legacy update.

    Its state is the optax state of the chain; convert a legacy
    ``OptimizerState`` with ``to_optax_state`` and back with
    ``from_optax_state``.
    """
    hp = self.update_hyper_params(**hyper_param_overrides)
    self._check_learning_rate(hp)
    return self.transform(hp)

  def to_optax_state(self, state, params):
    """Legacy ``OptimizerState`` -> the optax state of ``as_optax()``."""
    treedef = jax.tree_util.tree_structure(params)
    fields = self._split(treedef, state.param_states)
    count = jnp.asarray(state.step, dtype=jnp.int32)
    return self.state_to_optax(self.hyper_params, count, fields)

  def from_optax_state(self, opt_state, params, step=None):
    """The optax state of ``as_optax()`` -> legacy ``OptimizerState``.

    ``step`` defaults to the ``count`` the optax state holds; stateless rules
    (GradientDescent) hold none, so pass it (e.g. a TrainState's ``step``).
    """
    treedef = jax.tree_util.tree_structure(params)
    if step is None:
      step = _find_count(opt_state)
      if step is None:
        raise ValueError(
            f'{type(self).__name__}.from_optax_state: the optax state holds '
            'no step count; pass step=...')
    fields = self.state_from_optax(self.hyper_params, opt_state, None)
    return OptimizerState(step, self._join(treedef, fields))


def _find_count(opt_state):
  """The first ``count`` field of a (nested) optax state, or None."""
  if hasattr(opt_state, '_fields') and 'count' in opt_state._fields:
    return opt_state.count
  if isinstance(opt_state, (tuple, list)):
    for s in opt_state:
      c = _find_count(s)
      if c is not None:
        return c
  return None


# --------------------------------------------------------------------------
# from_optax: any optax transformation as a legacy OptimizerDef
# --------------------------------------------------------------------------


@struct.dataclass
class _OptaxHyperParams:
  overrides: Any


class OptaxWrapper(OptimizerDef):
  """A legacy ``OptimizerDef`` running any optax ``GradientTransformation``.

  The state is ``OptimizerState(step, param_states=<the optax state>)``.
  Per-call hyper-parameter overrides (``apply_gradient(g, learning_rate=..)``)
  work for transformations built with ``optax.inject_hyperparams``: they
  are written into the state's ``hyperparams`` for that one step only.
  """

  def __init__(self, tx):
    super().__init__(_OptaxHyperParams({}))
    self.tx = tx

  def update_hyper_params(self, **hyper_param_overrides):
    hp = hyper_param_overrides.pop('hyper_params', self.hyper_params)
    if hyper_param_overrides:
      hp = hp.replace(overrides={**hp.overrides, **hyper_param_overrides})
    return hp

  def init_state(self, params):
    return OptimizerState(_initial_step(), self.tx.init(params))

  def apply_gradient(self, hyper_params, params, state, grads):
    treedef = jax.tree_util.tree_structure(params)
    grads = treedef.unflatten(_flatten_like(treedef, grads, 'gradient'))
    opt_state = state.param_states
    overrides = hyper_params.overrides
    if overrides:
      current = getattr(opt_state, 'hyperparams', None)
      unknown = sorted(k for k in overrides
                       if current is None or k not in current)
      if unknown:
        known = ', '.join(current) if current else 'none'
        raise TypeError(
            f'from_optax transformation has no hyper-parameter(s) '
            f'{", ".join(map(repr, unknown))} (injectable hyper-parameters: '
            f'{known}; build it with optax.inject_hyperparams to override '
            'hyper-parameters per call)')
      opt_state = opt_state._replace(hyperparams={**current, **{
          k: jnp.asarray(v, dtype=jnp.result_type(current[k]))
          for k, v in overrides.items()}})
    updates, new_opt_state = self.tx.update(grads, opt_state, params)
    if overrides:
      # Legacy overrides hold for one step only.
      restored = {**new_opt_state.hyperparams,
                  **{k: state.param_states.hyperparams[k] for k in overrides}}
      new_opt_state = new_opt_state._replace(hyperparams=restored)
    new_params = optax.apply_updates(params, updates)
    return new_params, OptimizerState(state.step + 1, new_opt_state)

  def as_optax(self, **hyper_param_overrides):
    if hyper_param_overrides:
      raise TypeError('from_optax(tx).as_optax() takes no overrides; it '
                      'returns tx itself')
    return self.tx

  def to_optax_state(self, state, params):
    del params
    return state.param_states

  def from_optax_state(self, opt_state, params, step=None):
    del params
    if step is None:
      step = _find_count(opt_state)
      if step is None:
        raise ValueError('from_optax_state: the optax state holds no step '
                         'count; pass step=...')
    return OptimizerState(step, opt_state)


def from_optax(tx):
  """Wraps an optax ``GradientTransformation`` as a legacy ``OptimizerDef``."""
  return OptaxWrapper(tx)


# --------------------------------------------------------------------------
# Optimizer
# --------------------------------------------------------------------------


class _NoAux:
  """Marks a loss function without auxiliary output (compute_gradient)."""


def _is_bare_loss(x):
  # Old JAX counted NumPy arrays as jnp.ndarray too (jax-drift §3).
  return isinstance(x, (jax.Array, np.ndarray, np.generic))


class Optimizer(struct.PyTreeNode):
  """An optimizer definition together with its state and target.

  A pytree: ``optimizer_def`` is static (compared by identity), ``state``
  and ``target`` are its children, so an Optimizer is a ``jax.jit`` /
  ``jax.pmap`` argument and result.
  """

  optimizer_def: OptimizerDef = struct.field(pytree_node=False)
  state: Any = struct.field(pytree_node=True)
  target: Any = struct.field(pytree_node=True)

  def apply_gradient(self, grads, **hyper_param_overrides):
    """Applies ``grads``; keyword arguments override hyper-parameters for
    this step (e.g. a scheduled ``learning_rate``)."""
    hyper_params = self.optimizer_def.update_hyper_params(
        **hyper_param_overrides)
    new_target, new_state = self.optimizer_def.apply_gradient(
        hyper_params, self.target, self.state, grads)
    return self.replace(target=new_target, state=new_state)

  def compute_gradient(self, loss_fn):
    """Deprecated: ``(loss, grad)`` or ``(loss, aux, grad)`` of ``loss_fn``."""
    warnings.warn('compute_gradient() will be removed soon. Use jax.grad() '
                  'or jax.value_and_grad() instead.', DeprecationWarning,
                  stacklevel=2)

    def loss_wrapper(target):
      loss_and_aux = loss_fn(target)
      if _is_bare_loss(loss_and_aux):
        return loss_and_aux, _NoAux
      return loss_and_aux

    (loss, aux), grad = jax.value_and_grad(loss_wrapper, has_aux=True)(
        self.target)
    if aux is _NoAux:
      return loss, grad
    return loss, aux, grad

  compute_gradients = compute_gradient

  def optimize(self, loss_fn, **hyper_param_overrides):
    """Deprecated: ``compute_gradient`` then ``apply_gradient``."""
    warnings.warn('optimize() will be removed soon. Use jax.grad() or '
                  'jax.value_and_grad() and apply_gradient() instead.',
                  DeprecationWarning, stacklevel=2)
    output_and_grad = self.compute_gradient(loss_fn)
    grad = output_and_grad[-1]
    optimizer = self.apply_gradient(grad, **hyper_param_overrides)
    return (optimizer,) + output_and_grad[:-1]

  def replicate(self, devices=None, axis_name='batch'):
    """Replicates for data-parallel training; the result averages gradients
    over ``axis_name`` in ``apply_gradient`` (call it inside ``jax.pmap``)."""
    if devices is None:
      devices = jax.local_devices()
    optimizer_def = ReplicatedOptimizer(self.optimizer_def, devices, axis_name)
    optimizer = jax_utils.replicate(self, devices=devices)
    return optimizer.replace(optimizer_def=optimizer_def)

  def unreplicate(self):
    """The optimizer of the first replica, usable outside ``jax.pmap``."""
    if not isinstance(self.optimizer_def, ReplicatedOptimizer):
      raise ValueError('Cannot unreplicate an optimizer that is not '
                       'replicated.')
    optimizer_def = self.optimizer_def.optimizer_def
    optimizer = jax_utils.unreplicate(self)
    return optimizer.replace(optimizer_def=optimizer_def)

  def state_dict(self):
    return self.optimizer_def.state_dict(self.target, self.state)

  def restore_state(self, state):
    target, state = self.optimizer_def.restore_state(
        self.target, self.state, state)
    return self.replace(target=target, state=state)


# The dataclass machinery registered Optimizer already; legacy replaced that
# with the definition's state_dict / restore_state (ReplicatedOptimizer
# stores one replica).
serialization.register_serialization_state(
    Optimizer, Optimizer.state_dict, Optimizer.restore_state, override=True)


# --------------------------------------------------------------------------
# ReplicatedOptimizer
# --------------------------------------------------------------------------


class ReplicatedOptimizer(OptimizerDef):
  """Data-parallel wrapper: averages gradients over a pmap axis."""

  def __init__(self, optimizer_def, devices=None, axis_name='batch'):
    super().__init__(optimizer_def.hyper_params)
    if devices is None:
      devices = jax.local_devices()
    self.optimizer_def = optimizer_def
    self.devices = devices
    self.axis_name = axis_name

  def init_state(self, params):
    return self.optimizer_def.init_state(params)

  def _cross_replica_mean(self, grad):
    axis_size = jax.lax.psum(1, axis_name=self.axis_name)
    return jax.lax.psum(grad, axis_name=self.axis_name) / axis_size

  def _average(self, grads):
    if (type(self)._cross_replica_mean is not
        ReplicatedOptimizer._cross_replica_mean):
      # A subclass's own per-leaf mean, as legacy called it.
      return jax.tree_util.tree_map(self._cross_replica_mean, grads)
    # The same per-leaf psum / axis size, as one tree-wide pmean: the step
    # then lowers to the program of an explicit ``lax.pmean(grads)`` (and of
    # linen + optax's pmap step) instead of interleaving each leaf's
    # all-reduce with its division (docs/benchmarks.md).
    return jax.lax.pmean(grads, axis_name=self.axis_name)

  def apply_gradient(self, hyper_params, params, state, grads):
    try:
      grads = self._average(grads)
    except NameError as e:
      raise NameError(
          'apply_gradient on an optimizer replicated with '
          'Optimizer.replicate() averages the gradients over the pmap axis '
          f'{self.axis_name!r}, so it must run inside '
          f'jax.pmap(..., axis_name={self.axis_name!r}); outside pmap call '
          f'optimizer.unreplicate() first ({e})') from e
    return self.optimizer_def.apply_gradient(hyper_params, params, state,
                                             grads)

  def update_hyper_params(self, **hyper_param_overrides):
    return self.optimizer_def.update_hyper_params(**hyper_param_overrides)

  def state_dict(self, target, state):
    state_dict = self.optimizer_def.state_dict(target, state)
    # Only the first replica is stored.
    return jax.tree_util.tree_map(lambda x: x[0], state_dict)

  def restore_state(self, target, opt_state, state_dict):
    state_dict = jax_utils.replicate(state_dict, devices=self.devices)
    return self.optimizer_def.restore_state(target, opt_state, state_dict)


# --------------------------------------------------------------------------
# MultiOptimizer
# --------------------------------------------------------------------------

from flaxlegacy.optim._multi import MultiOptimizer  # noqa: E402,F401
from flaxlegacy.optim._multi import _ShapeDtype  # noqa: E402,F401
from flaxlegacy.optim._multi import set_multi_optimizer_layout  # noqa: E402,F401

del _traversal
