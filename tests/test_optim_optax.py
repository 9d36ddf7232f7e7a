"""The optax side of flax.optim: as_optax(), to/from_optax_state(),
from_optax(tx), and that a jitted legacy step is optax's arithmetic."""

import collections

from flax import serialization
from flax.training import train_state
import jax
import jax.extend  # noqa: F401  (jaxprs_in_params)
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from flax import optim  # legacy API


def _tree(seed=0):
  rng = np.random.RandomState(seed)
  return {'a': {'kernel': jnp.asarray(rng.normal(size=(5, 4)), jnp.float32),
                'bias': jnp.zeros((4,), jnp.float32)},
          'b': jnp.asarray(rng.normal(size=(3,)), jnp.float32)}


def _grads(step):
  return jax.tree_util.tree_map(
      lambda p: jnp.asarray(np.random.RandomState(step).normal(
          scale=0.1, size=p.shape), jnp.float32), _tree())


OPTAX_BACKED = [
    optim.GradientDescent(0.1),
    optim.Momentum(0.1, beta=0.8, nesterov=True),
    optim.Momentum(0.1, weight_decay=0.01),
    optim.Adam(0.01),
    optim.Adam(0.01, weight_decay=0.1),
    optim.Adagrad(0.1),
    optim.RMSProp(0.01),
    optim.RMSProp(0.01, centered=True),
    optim.LAMB(0.01, weight_decay=0.01),
    optim.LARS(0.1),
    optim.LARS(0.1, weight_decay=0.01, nesterov=True),
    optim.Adafactor(0.1, min_dim_size_to_factor=2),
    optim.Adafactor(0.05, beta1=0.9, weight_decay_rate=0.01,
                    clipping_threshold=None),
    optim.Adadelta(1.0, weight_decay=0.01),
    optim.AdaBelief(0.01),
]
IDS = [f'{type(d).__name__}{i}' for i, d in enumerate(OPTAX_BACKED)]


@pytest.mark.parametrize('opt_def', OPTAX_BACKED, ids=IDS)
def test_as_optax_is_the_legacy_update(opt_def):
  params = _tree()
  optimizer = opt_def.create(params)
  tx = opt_def.as_optax()
  opt_state = opt_def.to_optax_state(optimizer.state, params)
  legacy_step = jax.jit(lambda o, g: o.apply_gradient(g))

  @jax.jit
  def optax_step(p, s, g):
    updates, s = tx.update(g, s, p)
    return optax.apply_updates(p, updates), s

  for k in range(3):
    optimizer = legacy_step(optimizer, _grads(k))
    params, opt_state = optax_step(params, opt_state, _grads(k))
  # The same transformation: the same bits.
  for a, b in zip(jax.tree_util.tree_leaves(optimizer.target),
                  jax.tree_util.tree_leaves(params)):
    np.testing.assert_array_equal(a, b)
  back = opt_def.from_optax_state(opt_state, params, step=3)
  assert int(back.step) == 3
  got = serialization.to_state_dict(back)
  want = serialization.to_state_dict(optimizer.state)
  assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(
      want)
  for a, b in zip(jax.tree_util.tree_leaves(got),
                  jax.tree_util.tree_leaves(want)):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize('opt_def', OPTAX_BACKED, ids=IDS)
def test_optax_state_roundtrip(opt_def):
  params = _tree()
  optimizer = opt_def.create(params).apply_gradient(_grads(0))
  opt_state = opt_def.to_optax_state(optimizer.state, params)
  # Same structure as the transformation's own init.
  assert jax.tree_util.tree_structure(opt_state) == \
      jax.tree_util.tree_structure(opt_def.as_optax().init(params))
  back = opt_def.from_optax_state(opt_state, params, step=optimizer.state.step)
  assert jax.tree_util.tree_structure(back) == jax.tree_util.tree_structure(
      optimizer.state)
  for a, b in zip(jax.tree_util.tree_leaves(back),
                  jax.tree_util.tree_leaves(optimizer.state)):
    np.testing.assert_array_equal(a, b)


def test_from_optax_state_needs_a_step_without_count():
  params = _tree()
  opt_def = optim.GradientDescent(0.1)
  opt_state = opt_def.as_optax().init(params)
  with pytest.raises(ValueError, match='GradientDescent.from_optax_state: the '
                     'optax state holds no step count; pass step=...'):
    opt_def.from_optax_state(opt_state, params)
  adam = optim.Adam(0.1)
  state = adam.from_optax_state(
      adam.to_optax_state(adam.init_state(params).replace(step=7), params),
      params)
  assert int(state.step) == 7


def test_as_optax_takes_overrides_and_needs_a_learning_rate():
  with pytest.raises(AssertionError, match='no learning rate provided.'):
    optim.Momentum(beta=0.9).as_optax()
  tx = optim.Momentum(beta=0.9).as_optax(learning_rate=0.5)
  updates, _ = tx.update({'x': jnp.ones(2)}, tx.init({'x': jnp.ones(2)}))
  np.testing.assert_allclose(updates['x'], -0.5)


@pytest.mark.parametrize('opt_def', [
    optim.WeightNorm(optim.Momentum(0.1), wn_decay=1e-3),
    optim.MultiOptimizer((optim.ModelParamTraversal(
        lambda p, _: 'kernel' in p), optim.Adam(0.01))),
], ids=['WeightNorm', 'MultiOptimizer'])
def test_as_optax_for_definitions_without_optax_equivalent(opt_def):
  params = _tree()
  optimizer = opt_def.create(params)
  tx = opt_def.as_optax()
  opt_state = opt_def.to_optax_state(optimizer.state, params)
  for k in range(3):
    optimizer = optimizer.apply_gradient(_grads(k))
    updates, opt_state = tx.update(_grads(k), opt_state, params)
    params = optax.apply_updates(params, updates)
  # updates are new - old: one rounding of that difference.
  for a, b in zip(jax.tree_util.tree_leaves(optimizer.target),
                  jax.tree_util.tree_leaves(params)):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
  assert opt_def.from_optax_state(opt_state, params) is opt_state


# --------------------------------------------------------------------------
# Matching optax's own aliases
# --------------------------------------------------------------------------

ALIASES = [
    (optim.GradientDescent(0.1), optax.sgd(0.1)),
    (optim.Momentum(0.1, beta=0.9), optax.sgd(0.1, momentum=0.9)),
    (optim.Momentum(0.1, beta=0.9, nesterov=True),
     optax.sgd(0.1, momentum=0.9, nesterov=True)),
    (optim.Adam(0.01), optax.adam(0.01)),
    (optim.Adafactor(0.1, min_dim_size_to_factor=2),
     optax.adafactor(0.1, min_dim_size_to_factor=2)),
]


@pytest.mark.parametrize('opt_def,tx', ALIASES,
                         ids=[type(a[0]).__name__ + str(i)
                              for i, a in enumerate(ALIASES)])
def test_same_numbers_as_optax_alias(opt_def, tx):
  """Where optax's alias computes the legacy function (spec §7), a legacy
  Optimizer and a TrainState with that alias train to the same bits."""
  params = _tree()
  optimizer = opt_def.create(params)
  state = train_state.TrainState.create(apply_fn=None, params=params, tx=tx)
  legacy = jax.jit(lambda o, g: o.apply_gradient(g))
  modern = jax.jit(lambda s, g: s.apply_gradients(grads=g))
  for k in range(4):
    optimizer = legacy(optimizer, _grads(k))
    state = modern(state, _grads(k))
  for a, b in zip(jax.tree_util.tree_leaves(optimizer.target),
                  jax.tree_util.tree_leaves(state.params)):
    np.testing.assert_array_equal(a, b)


def _primitives(closed_jaxpr):
  counts = collections.Counter()

  def walk(jaxpr):
    for eqn in jaxpr.eqns:
      counts[eqn.primitive.name] += 1
      for sub in jax.extend.core.jaxprs_in_params(eqn.params):
        walk(sub)

  walk(closed_jaxpr.jaxpr)
  return counts


@pytest.mark.parametrize('opt_def,tx', [
    (optim.Momentum(0.1, beta=0.9), optax.sgd(0.1, momentum=0.9)),
    (optim.Adam(0.01), optax.adam(0.01)),
], ids=['Momentum', 'Adam'])
def test_jitted_step_is_optax_arithmetic(opt_def, tx):
  """The legacy step traces to the same operations as the TrainState step
  (no per-leaf Python in the program, nothing added)."""
  params = _tree()
  optimizer = opt_def.create(params)
  state = train_state.TrainState.create(apply_fn=None, params=params, tx=tx)
  grads = _grads(0)
  legacy = jax.make_jaxpr(lambda o, g: o.apply_gradient(g))(optimizer, grads)
  modern = jax.make_jaxpr(lambda s, g: s.apply_gradients(grads=g))(state,
                                                                   grads)
  assert _primitives(legacy) == _primitives(modern)


# --------------------------------------------------------------------------
# from_optax
# --------------------------------------------------------------------------


def test_from_optax_trains_like_the_legacy_optimizer():
  params = _tree()
  wrapped = optim.from_optax(optax.adam(0.01)).create(params)
  legacy = optim.Adam(0.01).create(params)
  step = jax.jit(lambda o, g: o.apply_gradient(g))
  for k in range(3):
    wrapped = step(wrapped, _grads(k))
    legacy = step(legacy, _grads(k))
  for a, b in zip(jax.tree_util.tree_leaves(wrapped.target),
                  jax.tree_util.tree_leaves(legacy.target)):
    np.testing.assert_array_equal(a, b)
  assert int(wrapped.state.step) == 3
  sd = serialization.to_state_dict(wrapped)
  assert set(sd['state']) == {'step', 'param_states'}
  assert set(sd['state']['param_states']['0']) == {'count', 'mu', 'nu'}
  restored = serialization.from_state_dict(
      optim.from_optax(optax.adam(0.01)).create(params), sd)
  np.testing.assert_array_equal(restored.target['b'], wrapped.target['b'])


def test_from_optax_per_call_overrides():
  tx = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)
  optimizer = optim.from_optax(tx).create({'x': jnp.ones(2)})
  step = jax.jit(lambda o, lr: o.apply_gradient({'x': jnp.ones(2)},
                                                learning_rate=lr))
  new = step(optimizer, 0.5)
  np.testing.assert_allclose(new.target['x'], 0.5)
  # The override holds for that step only.
  np.testing.assert_allclose(new.state.param_states.hyperparams[
      'learning_rate'], 0.1)
  new = new.apply_gradient({'x': jnp.ones(2)})
  np.testing.assert_allclose(new.target['x'], 0.4)
  with pytest.raises(TypeError, match="from_optax transformation has no "
                     "hyper-parameter\\(s\\) 'beta' \\(injectable "
                     'hyper-parameters: learning_rate; build it'):
    optimizer.apply_gradient({'x': jnp.ones(2)}, beta=0.5)
  plain = optim.from_optax(optax.sgd(0.1)).create({'x': jnp.ones(2)})
  with pytest.raises(TypeError, match='injectable hyper-parameters: none; '
                     'build it with optax.inject_hyperparams'):
    plain.apply_gradient({'x': jnp.ones(2)}, learning_rate=0.5)


def test_from_optax_as_optax_and_state_conversion():
  tx = optax.adam(0.01)
  opt_def = optim.from_optax(tx)
  assert opt_def.as_optax() is tx
  params = _tree()
  state = opt_def.init_state(params)
  assert opt_def.to_optax_state(state, params) is state.param_states
  back = opt_def.from_optax_state(state.param_states, params)
  assert int(back.step) == 0
