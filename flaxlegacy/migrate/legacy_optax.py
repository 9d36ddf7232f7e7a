"""The legacy ``flax.optim`` update rules as optax transformations.

Plain JAX + optax: importing this module does not activate the
compatibility layer, so code that ``flaxlegacy upgrade`` rewrote imports it
with ``FLAXLEGACY=off``.  The runtime optimizers of ``flaxlegacy.optim``
build their updates from the same functions, so the two cannot drift.

Constructors, one per legacy optimizer whose arithmetic plain optax does
not reproduce, each with the legacy constructor's parameters (names, order
and defaults), so ``optim.LAMB(1e-3, weight_decay=0.01)`` becomes
``legacy_optax.lamb(1e-3, weight_decay=0.01)``:

* ``momentum``: for a learning rate set per step when the weight decay is
  not zero (plain ``optax.sgd`` otherwise);
* ``adagrad``: eps outside the root (optax's ``adagrad`` puts it inside
  and starts the sum at 0.1, spec §7.4);
* ``lamb``: legacy's trust ratio (a zero-initialised leaf never moves,
  spec §7.6);
* ``lars``: the ratio on the raw gradient, coupled decay (spec §7.7);
* ``adabelief`` / ``adadelta``: weight decay after the scaling (optax
  has none / applies it first);
* ``adafactor``: legacy's hyper-parameter names, statistics in float32.

Their pieces, to chain with optax's own:

* ``scale_by_legacy_adagrad``: ``g / (sqrt(G') + eps)``;
* ``scale_by_legacy_trust_ratio``: LAMB's ratio ``|p| / |u|``, which is
  0 when ``|p| = 0`` and 1 only when both norms are 0 - optax uses 1
  whenever either norm is 0;
* ``scale_by_legacy_lars_trust_ratio``: LARS's ratio
  ``tc |p| / (|g| + wd |p| + eps)`` on the raw gradient, then the coupled
  decay ``g + wd p`` - optax's ratio uses ``|g + wd p|``;
* ``in_float32``: a transformation run on float32 copies.

A user-written ``OptimizerDef`` (``flaxlegacy upgrade`` turns the class
into a function of its constructor's parameters, rules/optimizer_defs.py):

* ``from_optimizer_def(hyper_params, init_param_state=...,
  apply_param_gradient=...)``: the base class's loop over the parameter
  tree and its step counter, as an optax transformation (an overridden
  ``apply_gradient`` / ``init_state`` replaces the loop);
* ``OptimizerState(step, param_states)``: its state, legacy's layout.

Hyper-parameters on which legacy branched in Python (LAMB's and
Momentum's ``weight_decay != 0``, LARS's) must be Python numbers here too;
``optax.inject_hyperparams`` should list them in ``static_args``.
"""

import types
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax


def scale_by_legacy_adagrad(eps=1e-8):
  """Adagrad scaling with eps outside the root; state ``sum_of_squares``."""

  def init_fn(params):
    return optax.ScaleByRssState(
        sum_of_squares=jax.tree_util.tree_map(jnp.zeros_like, params))

  def update_fn(updates, state, params=None):
    del params
    sum_sq = jax.tree_util.tree_map(lambda g, s: s + jnp.square(g), updates,
                                    state.sum_of_squares)
    updates = jax.tree_util.tree_map(lambda g, s: g / (jnp.sqrt(s) + eps),
                                     updates, sum_sq)
    return updates, optax.ScaleByRssState(sum_of_squares=sum_sq)

  return optax.GradientTransformation(init_fn, update_fn)


def scale_by_legacy_trust_ratio():
  """LAMB's layer-wise trust ratio ``|p| / |u|`` (1 iff both are 0)."""

  def update_fn(updates, state, params):
    if params is None:
      raise ValueError('scale_by_legacy_trust_ratio needs params')

    def scale(u, p):
      p_norm = jnp.linalg.norm(p)
      u_norm = jnp.linalg.norm(u)
      ratio = jnp.where(p_norm + u_norm > 0., p_norm / u_norm, 1.)
      return ratio * u

    return jax.tree_util.tree_map(scale, updates, params), state

  return optax.GradientTransformation(optax.init_empty_state, update_fn)


def scale_by_legacy_lars_trust_ratio(weight_decay=0., trust_coefficient=1e-3,
                                     eps=0.):
  """LARS's ratio on the raw gradient, then the coupled weight decay."""

  def update_fn(updates, state, params):
    if params is None:
      raise ValueError('scale_by_legacy_lars_trust_ratio needs params')

    def scale(g, p):
      p_norm = jnp.linalg.norm(p)
      g_norm = jnp.linalg.norm(g)
      ratio = trust_coefficient * p_norm / (
          g_norm + weight_decay * p_norm + eps)
      # v0.2.2+ guard (Decision D12).
      ratio = jnp.where(jnp.logical_or(g_norm == 0., p_norm == 0.), 1., ratio)
      if weight_decay != 0:
        g = g + weight_decay * p
      return ratio * g

    return jax.tree_util.tree_map(scale, updates, params), state

  return optax.GradientTransformation(optax.init_empty_state, update_fn)


def in_float32(tx):
  """Runs ``tx`` on float32 copies of params and updates (Adafactor keeps
  its statistics in float32 whatever the parameter dtype); a no-op for
  float32 trees."""

  def cast(tree):
    return jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32), tree)

  def init_fn(params):
    return tx.init(cast(params))

  def update_fn(updates, state, params=None):
    return tx.update(cast(updates), state,
                     None if params is None else cast(params))

  return optax.GradientTransformation(init_fn, update_fn)


# --- the legacy rules, one constructor each --------------------------------
#
# ``_<rule>`` builds the chain for any learning rate, None included (None is
# optax's identity scaling: ``flaxlegacy.optim`` initialises its states with
# the constructor's learning rate, which legacy allowed to be given later);
# the public constructors require one.


def _need_learning_rate(name, learning_rate):
  if learning_rate is None:
    raise ValueError(f'legacy_optax.{name}: no learning rate provided.')


def _momentum(learning_rate, beta, weight_decay, nesterov):
  decay = ([optax.add_decayed_weights(weight_decay)]
           if weight_decay != 0 else [])  # a Python branch in legacy too
  return optax.chain(*decay, optax.trace(decay=beta, nesterov=nesterov),
                     optax.scale_by_learning_rate(learning_rate))


def _adagrad(learning_rate, eps):
  return optax.chain(scale_by_legacy_adagrad(eps=eps),
                     optax.scale_by_learning_rate(learning_rate))


def _lamb(learning_rate, beta1, beta2, weight_decay, eps):
  decay = ([optax.add_decayed_weights(weight_decay)]
           if weight_decay != 0.0 else [])  # a Python branch in legacy too
  return optax.chain(
      optax.scale_by_adam(b1=beta1, b2=beta2, eps=eps, eps_root=0.0),
      *decay,
      scale_by_legacy_trust_ratio(),
      optax.scale_by_learning_rate(learning_rate))


def _lars(learning_rate, beta, weight_decay, trust_coefficient, eps,
          nesterov):
  if isinstance(weight_decay, (int, float)) and weight_decay == 0:
    ratio = optax.scale_by_trust_ratio(trust_coefficient=trust_coefficient,
                                       eps=eps)
  else:
    ratio = scale_by_legacy_lars_trust_ratio(weight_decay, trust_coefficient,
                                             eps)
  return optax.chain(
      ratio,
      optax.identity() if learning_rate is None else optax.scale(
          learning_rate),
      optax.trace(decay=beta, nesterov=nesterov),
      optax.scale(-1))


def _adabelief(learning_rate, beta1, beta2, eps, weight_decay):
  return optax.chain(
      optax.scale_by_belief(b1=beta1, b2=beta2, eps=eps, eps_root=eps),
      optax.add_decayed_weights(weight_decay),
      optax.scale_by_learning_rate(learning_rate))


def _adadelta(learning_rate, rho, eps, weight_decay):
  return optax.chain(optax.scale_by_adadelta(rho=rho, eps=eps),
                     optax.add_decayed_weights(weight_decay),
                     optax.scale_by_learning_rate(learning_rate))


def _adafactor_pieces(hp, const, dtype_momentum):
  """(name, transformation) pairs of Adafactor's chain.

  ``hp`` holds the hyper-parameters of this update, ``const`` those given
  to the constructor (legacy read ``factored``, ``min_dim_size_to_factor``
  and ``multiply_by_parameter_scale`` from there); attribute objects.
  """
  pieces = [('factored', optax.scale_by_factored_rms(
      factored=const.factored, decay_rate=hp.decay_rate,
      step_offset=hp.step_offset,
      min_dim_size_to_factor=const.min_dim_size_to_factor,
      epsilon=hp.epsilon1))]
  if hp.clipping_threshold is not None:
    pieces.append(('clip', optax.clip_by_block_rms(hp.clipping_threshold)))
  pieces.append(('lr', optax.scale_by_learning_rate(hp.learning_rate,
                                                    flip_sign=False)))
  if const.multiply_by_parameter_scale:
    pieces.append(('param_scale',
                   optax.scale_by_param_block_rms(min_scale=hp.epsilon2)))
  if hp.beta1 is not None:
    pieces.append(('momentum', optax.ema(
        hp.beta1, debias=False, accumulator_dtype=dtype_momentum)))
  if hp.weight_decay_rate is not None:
    pieces.append(('decay', optax.add_decayed_weights(hp.weight_decay_rate)))
  pieces.append(('descent', optax.scale(-1)))
  return pieces


def _adafactor(hp, const, dtype_momentum):
  return in_float32(optax.chain(
      *(tx for _, tx in _adafactor_pieces(hp, const, dtype_momentum))))


def momentum(learning_rate=None, beta=0.9, weight_decay=0, nesterov=False):
  """Legacy ``optim.Momentum``: the decay ``wd p`` joins the gradient before
  the momentum (``optax.chain(optax.add_decayed_weights(wd), optax.sgd(lr,
  beta, nesterov))`` computes the same; this form keeps one optax state
  with ``hyperparams`` under ``optax.inject_hyperparams``)."""
  _need_learning_rate('momentum', learning_rate)
  return _momentum(learning_rate, beta, weight_decay, nesterov)


def adagrad(learning_rate=None, eps=1e-8):
  """Legacy ``optim.Adagrad``: ``p' = p - lr g / (sqrt(G + g^2) + eps)``."""
  _need_learning_rate('adagrad', learning_rate)
  return _adagrad(learning_rate, eps)


def lamb(learning_rate=None, beta1=0.9, beta2=0.999, weight_decay=0,
         eps=1e-6):
  """Legacy ``optim.LAMB``."""
  _need_learning_rate('lamb', learning_rate)
  return _lamb(learning_rate, beta1, beta2, weight_decay, eps)


def lars(learning_rate=None, beta=0.9, weight_decay=0,
         trust_coefficient=0.001, eps=0, nesterov=False):
  """Legacy ``optim.LARS``."""
  _need_learning_rate('lars', learning_rate)
  return _lars(learning_rate, beta, weight_decay, trust_coefficient, eps,
               nesterov)


def adabelief(learning_rate=None, beta1=0.9, beta2=0.999, eps=1e-16,
              weight_decay=0.0):
  """Legacy ``optim.AdaBelief``."""
  _need_learning_rate('adabelief', learning_rate)
  return _adabelief(learning_rate, beta1, beta2, eps, weight_decay)


def adadelta(learning_rate=None, rho=0.9, eps=1e-6, weight_decay=0.0):
  """Legacy ``optim.Adadelta``."""
  _need_learning_rate('adadelta', learning_rate)
  return _adadelta(learning_rate, rho, eps, weight_decay)


def adafactor(learning_rate=None, factored=True,
              multiply_by_parameter_scale=True, beta1=None, decay_rate=0.8,
              step_offset=0, clipping_threshold=1.0, weight_decay_rate=None,
              min_dim_size_to_factor=128, epsilon1=1e-30, epsilon2=1e-3,
              dtype_momentum=jnp.float32):
  """Legacy ``optim.Adafactor``."""
  _need_learning_rate('adafactor', learning_rate)
  hp = types.SimpleNamespace(
      learning_rate=learning_rate, factored=factored,
      multiply_by_parameter_scale=multiply_by_parameter_scale, beta1=beta1,
      decay_rate=decay_rate, step_offset=step_offset,
      clipping_threshold=clipping_threshold,
      weight_decay_rate=weight_decay_rate,
      min_dim_size_to_factor=min_dim_size_to_factor, epsilon1=epsilon1,
      epsilon2=epsilon2)
  return _adafactor(hp, hp, jax.dtypes.canonicalize_dtype(dtype_momentum))


# --- MultiOptimizer ----------------------------------------------------------


def _legacy_path(key_path):
  """A key path as legacy traversals spelled it: ``/Dense_0/kernel``."""
  parts = []
  for k in key_path:
    for attr in ('key', 'name', 'idx'):
      if hasattr(k, attr):
        parts.append(str(getattr(k, attr)))
        break
    else:
      parts.append(str(k))
  return '/' + '/'.join(parts)


def traversal_labels(*filters):
  """``param_labels`` for ``optax.multi_transform`` from legacy
  ``ModelParamTraversal`` filters.

  ``filters[i](path, value)`` is the filter of the i-th
  ``(ModelParamTraversal(filter), optimizer)`` pair of a legacy
  ``MultiOptimizer``; ``path`` is the parameter's legacy path
  (``/Dense_0/kernel``).  A parameter gets the label ``'i'`` of the one
  filter that selects it, or ``'frozen'`` if none does (legacy left it
  unchanged; pair the label with ``optax.set_to_zero()``).  Legacy applied
  every optimizer whose traversal selected a parameter, one after the
  other; ``optax.multi_transform`` gives each parameter one
  transformation, so a parameter that two filters select is an error.
  """

  def labels(params):
    def label(key_path, value):
      path = _legacy_path(key_path)
      hits = [str(i) for i, f in enumerate(filters) if f(path, value)]
      if len(hits) > 1:
        raise ValueError(
            f'parameter {path} is selected by the traversals of MultiOptimizer '
            f'pairs {", ".join(hits)}: legacy applied each of those optimizers '
            'in turn, optax.multi_transform applies one; make the filters '
            'disjoint')
      return hits[0] if hits else 'frozen'
    return jax.tree_util.tree_map_with_path(label, params)

  return labels


# --- user-written optimizer definitions ----------------------------------


class OptimizerState(NamedTuple):
  """Legacy ``flax.optim.OptimizerState``: the step count and one state per
  parameter (``param_states``, shaped like the parameter tree)."""
  step: Any
  param_states: Any

  def replace(self, **updates):
    return self._replace(**updates)


def from_optimizer_def(hyper_params, init_param_state=None,
                       apply_param_gradient=None, init_state=None,
                       apply_gradient=None):
  """A legacy optimizer definition, given as functions, as an optax
  ``GradientTransformation``.

  ``init_param_state(param)`` and ``apply_param_gradient(step,
  hyper_params, param, state, grad) -> (new_param, new_state)`` are the
  per-parameter hooks of a legacy ``OptimizerDef``; the state is
  ``OptimizerState(step, param_states)`` and each update calls the hook
  once per leaf with the step before it, in the order of the flattened
  parameter tree, then counts the step, as legacy's base class did.
  ``init_state(params)`` / ``apply_gradient(hyper_params, params, state,
  grads) -> (new_params, new_state)``, where the definition overrode
  them, take the place of that loop.  The optax update is ``new_params -
  params``: ``optax.apply_updates`` gives the legacy parameters back
  (exactly where the two are within a factor of 2 of each other, else up
  to one rounding).
  """
  if init_state is None:
    if init_param_state is None:
      raise ValueError('from_optimizer_def: give init_param_state or '
                       'init_state')

    def init_state(params):  # pylint: disable=function-redefined
      return OptimizerState(
          jnp.asarray(0, jnp.int32),
          jax.tree_util.tree_map(init_param_state, params))

  if apply_gradient is None:
    if apply_param_gradient is None:
      raise ValueError('from_optimizer_def: give apply_param_gradient or '
                       'apply_gradient')

    def apply_gradient(hyper_params, params, state, grads):  # pylint: disable=function-redefined
      step = state.step
      params_flat, treedef = jax.tree_util.tree_flatten(params)
      states_flat = treedef.flatten_up_to(state.param_states)
      grads_flat = treedef.flatten_up_to(grads)
      out = [apply_param_gradient(step, hyper_params, p, s, g)
             for p, s, g in zip(params_flat, states_flat, grads_flat)]
      new_params_flat, new_states_flat = list(zip(*out)) if out else ((),
                                                                       ())
      return (jax.tree_util.tree_unflatten(treedef, new_params_flat),
              OptimizerState(step + 1, jax.tree_util.tree_unflatten(
                  treedef, new_states_flat)))

  def update_fn(updates, state, params=None):
    if params is None:
      raise ValueError('this optimizer (a legacy OptimizerDef) computes new '
                       'parameters: update() needs the params argument')
    new_params, new_state = apply_gradient(hyper_params, params, state,
                                           updates)
    return jax.tree_util.tree_map(lambda n, p: n - p, new_params,
                                  params), new_state

  return optax.GradientTransformation(init_state, update_fn)
