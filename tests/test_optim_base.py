"""flax.optim core: names, OptimizerDef / Optimizer API, state layouts,
serialization, pytree behaviour and the errors bad input gets."""

import importlib
import warnings

from flax import serialization
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flax import nn  # legacy API
from flax import optim  # legacy API

# --------------------------------------------------------------------------
# Names (spec §1)
# --------------------------------------------------------------------------

PUBLIC = ['Adam', 'AdaBelief', 'Adadelta', 'Adafactor', 'Adagrad',
          'OptimizerState', 'OptimizerDef', 'Optimizer', 'MultiOptimizer',
          'ModelParamTraversal', 'DynamicScale', 'LAMB', 'LARS', 'Momentum',
          'RMSProp', 'GradientDescent', 'WeightNorm']

# module -> names legacy code / tests import from it
SUBMODULE_NAMES = {
    'base': ['OptimizerState', 'OptimizerDef', 'Optimizer',
             'ReplicatedOptimizer', 'MultiOptimizer', 'ModelParamTraversal',
             '_NoAux', '_ShapeDtype', '_sorted_items'],
    'sgd': ['GradientDescent', '_GradientDescentHyperParams'],
    'momentum': ['Momentum', '_MomentumHyperParams', '_MomentumParamState'],
    'adam': ['Adam', '_AdamHyperParams', '_AdamParamState'],
    'adagrad': ['Adagrad', '_AdagradHyperParams', '_AdagradParamState'],
    'rmsprop': ['RMSProp', '_RMSPropHyperParams', '_RMSPropParamState'],
    'lamb': ['LAMB', '_LAMBHyperParams', '_LAMBParamState'],
    'lars': ['LARS', '_LARSHyperParams', '_LARSParamState'],
    'adafactor': ['Adafactor', '_AdafactorHyperParams',
                  '_AdafactorParamState'],
    'adadelta': ['Adadelta', '_AdadeltaHyperParams', '_AdadeltaParamState'],
    'adabelief': ['AdaBelief', '_AdaBeliefHyperParams',
                  '_AdaBeliefParamState'],
    'weight_norm': ['WeightNorm', '_WeightNormHyperParams',
                    '_WeightNormParamState'],
    'dynamic_scale': ['DynamicScale', 'DynamicScaleResult'],
}


def test_package_all_is_legacy_public_set():
  assert sorted(optim.__all__) == sorted(PUBLIC)
  for name in PUBLIC:
    assert getattr(optim, name) is not None


@pytest.mark.parametrize('module', sorted(SUBMODULE_NAMES))
def test_submodule_names(module):
  mod = importlib.import_module('flax.optim.' + module)
  for name in SUBMODULE_NAMES[module]:
    value = getattr(mod, name)
    if not name.startswith('_') or module == 'base':
      continue
    # Decision D1: v0.1-style private names on the package too.
    assert getattr(optim, name) is value


def test_dynamic_scale_is_flax_training_class():
  from flax.training import dynamic_scale  # pylint: disable=g-import-not-at-top
  assert optim.DynamicScale is dynamic_scale.DynamicScale


# --------------------------------------------------------------------------
# Constructors: argument order = hyper-parameter field order (spec §7)
# --------------------------------------------------------------------------

HYPER_PARAMS = [
    (optim.GradientDescent, (0.1,), (0.1,)),
    (optim.Momentum, (0.1,), (0.1, 0.9, 0, False)),
    (optim.Adam, (0.1,), (0.1, 0.9, 0.999, 1e-8, 0.0)),
    (optim.Adagrad, (0.1,), (0.1, 1e-8)),
    (optim.RMSProp, (0.1,), (0.1, 0.9, 1e-8, False)),
    (optim.LAMB, (0.1,), (0.1, 0.9, 0.999, 0, 1e-6)),
    (optim.LARS, (0.1,), (0.1, 0.9, 0, 0.001, 0, False)),
    (optim.Adafactor, (0.1,),
     (0.1, True, True, None, 0.8, 0, 1.0, None, 128, 1e-30, 1e-3)),
    (optim.Adadelta, (0.1,), (0.1, 0.9, 1e-6, 0.0)),
    (optim.AdaBelief, (0.1,), (0.1, 0.9, 0.999, 1e-16, 0.0)),
]


@pytest.mark.parametrize('cls,args,fields', HYPER_PARAMS,
                         ids=[c[0].__name__ for c in HYPER_PARAMS])
def test_default_hyper_params(cls, args, fields):
  hp = cls(*args).hyper_params
  assert tuple(getattr(hp, f.name) for f in
               __import__('dataclasses').fields(hp)) == fields
  # Stored exactly as given (Decision D4): Python floats stay floats.
  assert type(hp.learning_rate) is float  # pylint: disable=unidiomatic-typecheck


# --------------------------------------------------------------------------
# State layouts (spec §3.2)
# --------------------------------------------------------------------------

PARAMS = {'dense': {'kernel': jnp.ones((4, 3)), 'bias': jnp.zeros((3,))}}

STATE_KEYS = [
    (optim.GradientDescent(0.1), {}),
    (optim.Momentum(0.1), {'momentum': ((4, 3), (3,))}),
    (optim.Adam(0.1), {'grad_ema': ((4, 3), (3,)),
                       'grad_sq_ema': ((4, 3), (3,))}),
    (optim.Adagrad(0.1), {'G': ((4, 3), (3,))}),
    (optim.RMSProp(0.1), {'v': ((4, 3), (3,)), 'mg': (None, None)}),
    (optim.RMSProp(0.1, centered=True), {'v': ((4, 3), (3,)),
                                         'mg': ((4, 3), (3,))}),
    (optim.LAMB(0.1), {'grad_ema': ((4, 3), (3,)),
                       'grad_sq_ema': ((4, 3), (3,))}),
    (optim.LARS(0.1), {'momentum': ((4, 3), (3,))}),
    (optim.Adafactor(0.1, min_dim_size_to_factor=2),
     {'v_row': ((3,), (1,)), 'v_col': ((4,), (1,)), 'v': ((1,), (3,)),
      'm': ((1,), (1,))}),
    (optim.Adafactor(0.1, beta1=0.9, factored=False),
     {'v_row': ((1,), (1,)), 'v_col': ((1,), (1,)), 'v': ((4, 3), (3,)),
      'm': ((4, 3), (3,))}),
    (optim.Adadelta(0.1), {'sq_avg': ((4, 3), (3,)),
                           'acc_delta': ((4, 3), (3,))}),
    (optim.AdaBelief(0.1), {'grad_ema': ((4, 3), (3,)),
                            'grad_sq_ema': ((4, 3), (3,))}),
]


@pytest.mark.parametrize('opt_def,fields', STATE_KEYS,
                         ids=[f'{type(c[0]).__name__}{i}'
                              for i, c in enumerate(STATE_KEYS)])
def test_state_dict_layout(opt_def, fields):
  optimizer = opt_def.create(PARAMS)
  sd = serialization.to_state_dict(optimizer)
  assert set(sd) == {'target', 'state'}
  assert set(sd['state']) == {'step', 'param_states'}
  assert int(sd['state']['step']) == 0
  assert np.asarray(sd['state']['step']).dtype == np.int32  # Decision D3
  for leaf, i in (('kernel', 0), ('bias', 1)):
    leaf_state = sd['state']['param_states']['dense'][leaf]
    assert set(leaf_state) == set(fields)
    for name, shapes in fields.items():
      value = leaf_state[name]
      if shapes[i] is None:
        assert value is None
      else:
        assert value.shape == shapes[i], (name, leaf)
        assert value.dtype == jnp.float32
        assert not np.any(np.asarray(value))


def test_weight_norm_state_layout():
  opt_def = optim.WeightNorm(optim.Momentum(0.1))
  state = opt_def.init_state(PARAMS)
  shapes = jax.tree_util.tree_map(np.shape, state)
  assert shapes.param_states['dense']['kernel'] == (
      optim._WeightNormParamState(optim._MomentumParamState((4, 3)),
                                  optim._MomentumParamState((1, 3)), (1, 3)))
  # A vector is not decomposed: scale_state and mult are ().
  assert shapes.param_states['dense']['bias'] == (
      optim._WeightNormParamState(optim._MomentumParamState((3,)), (), ()))


# --------------------------------------------------------------------------
# OptimizerDef API
# --------------------------------------------------------------------------


def test_update_hyper_params():
  opt_def = optim.Adam(0.1, beta1=0.5)
  assert opt_def.update_hyper_params() is opt_def.hyper_params
  hp = opt_def.update_hyper_params(learning_rate=0.2)
  assert hp == optim._AdamHyperParams(0.2, 0.5, 0.999, 1e-8, 0.0)
  whole = optim._AdamHyperParams(1., 2., 3., 4., 5.)
  assert opt_def.update_hyper_params(hyper_params=whole) is whole
  assert opt_def.update_hyper_params(hyper_params=whole, eps=7.).eps == 7.
  assert opt_def.hyper_params.learning_rate == 0.1  # unchanged


@pytest.mark.parametrize('opt_def,bad', [
    (optim.Momentum(0.1), 'beta1'),
    (optim.Adam(0.1), 'beta'),
    (optim.GradientDescent(0.1), 'momentum'),
])
def test_unknown_override_is_type_error_naming_it(opt_def, bad):
  optimizer = opt_def.create(PARAMS)
  with pytest.raises(TypeError, match=(
      f"{type(opt_def).__name__} has no hyper-parameter\\(s\\) '{bad}'; its "
      'hyper-parameters are: learning_rate')):
    optimizer.apply_gradient(PARAMS, **{bad: 0.5})


def test_no_learning_rate():
  optimizer = optim.Momentum(beta=0.9).create(PARAMS)
  with pytest.raises(AssertionError, match='no learning rate provided.'):
    optimizer.apply_gradient(PARAMS)
  # ... and the legacy pattern: pass it on every call.
  new = optimizer.apply_gradient(PARAMS, learning_rate=0.5)
  np.testing.assert_allclose(new.target['dense']['kernel'], 0.5)


def test_gradient_tree_mismatch():
  optimizer = optim.Adam(0.1).create(PARAMS)
  with pytest.raises(ValueError, match=(
      r'The gradient tree does not match the optimizer target \(2 leaves\): '
      r".*got dict with 1 leaves.*Dict key mismatch")):
    optimizer.apply_gradient({'dense': {'kernel': jnp.ones((4, 3))}})


def test_gradient_tree_mismatch_legacy_style_def():
  optimizer = _LegacySGD(0.1).create(PARAMS)
  with pytest.raises(ValueError, match='The gradient tree does not match'):
    optimizer.apply_gradient([1., 2.])


def test_param_states_mismatch():
  opt_def = optim.Momentum(0.1)
  state = opt_def.init_state({'a': jnp.ones(2)})
  with pytest.raises(ValueError, match='The optimizer param_states tree does '
                     'not match'):
    opt_def.apply_gradient(opt_def.hyper_params, PARAMS, state, PARAMS)


def test_unreplicate_requires_replicated():
  with pytest.raises(ValueError, match='Cannot unreplicate an optimizer that '
                     'is not replicated.'):
    optim.Momentum(0.1).create(PARAMS).unreplicate()


def test_replicated_apply_outside_pmap():
  replicated = optim.Momentum(0.1).create(PARAMS).replicate()
  grads = jax.tree_util.tree_map(lambda x: x[None], PARAMS)
  with pytest.raises(NameError, match=(
      "optimizer replicated with Optimizer.replicate\\(\\) averages the "
      "gradients over the pmap axis 'batch', so it must run inside "
      "jax.pmap\\(..., axis_name='batch'\\)")):
    replicated.apply_gradient(grads)


def test_replicate_unreplicate_roundtrip():
  optimizer = optim.Adam(0.1).create(PARAMS)
  replicated = optimizer.replicate()
  assert isinstance(replicated.optimizer_def, optim.ReplicatedOptimizer)
  assert replicated.optimizer_def.optimizer_def is optimizer.optimizer_def
  assert replicated.state.step.shape == (jax.local_device_count(),)
  back = replicated.unreplicate()
  assert back.optimizer_def is optimizer.optimizer_def
  chex_equal(back, optimizer)
  # The state dict of a replicated optimizer holds one replica.
  sd = serialization.to_state_dict(replicated)
  assert sd['target']['dense']['kernel'].shape == (4, 3)
  restored = serialization.from_state_dict(replicated, sd)
  assert restored.target['dense']['kernel'].shape == (
      jax.local_device_count(), 4, 3)


def chex_equal(a, b):
  la, ta = jax.tree_util.tree_flatten(a)
  lb, tb = jax.tree_util.tree_flatten(b)
  assert ta == tb
  for x, y in zip(la, lb):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_empty_target():
  optimizer = optim.Adam(0.1).create({})
  new = optimizer.apply_gradient({})
  assert new.state == optim.OptimizerState(1, {})
  assert new.target == {}


# --------------------------------------------------------------------------
# User-written legacy OptimizerDef subclasses work unchanged
# --------------------------------------------------------------------------


class _LegacySGD(optim.OptimizerDef):
  """As a 2020 codebase wrote its own optimizer (plain per-leaf hooks)."""

  calls = []

  def __init__(self, learning_rate=None, decay=0.5):
    super().__init__(optim._MomentumHyperParams(learning_rate, decay, 0,
                                                False))

  def init_param_state(self, param):
    return optim._MomentumParamState(jnp.zeros_like(param))

  def apply_param_gradient(self, step, hyper_params, param, state, grad):
    self.calls.append((step, hyper_params.learning_rate))
    momentum = hyper_params.beta * state.momentum + grad
    return param - hyper_params.learning_rate * momentum, \
        optim._MomentumParamState(momentum)


def test_user_written_optimizer_def():
  _LegacySGD.calls.clear()
  optimizer = _LegacySGD(0.1).create(PARAMS)
  kernel_state = optimizer.state.param_states['dense']['kernel']
  assert isinstance(kernel_state, optim._MomentumParamState)
  np.testing.assert_array_equal(kernel_state.momentum, np.zeros((4, 3)))
  step = jax.jit(lambda o, g, lr: o.apply_gradient(g, learning_rate=lr))
  grads = jax.tree_util.tree_map(jnp.ones_like, PARAMS)
  optimizer = step(optimizer, grads, 0.1)
  optimizer = step(optimizer, grads, 0.2)
  # Called once per leaf per trace, with (step, hyper_params, param, ...).
  assert len(_LegacySGD.calls) == 2
  # Same numbers as legacy Momentum (whose rule this is).
  ref = optim.Momentum(beta=0.5).create(PARAMS)
  ref = ref.apply_gradient(grads, learning_rate=0.1)
  ref = ref.apply_gradient(grads, learning_rate=0.2)
  np.testing.assert_allclose(optimizer.target['dense']['kernel'],
                             ref.target['dense']['kernel'], rtol=1e-6)
  assert int(optimizer.state.step) == 2
  # ... also with focus, and through as_optax().
  focused = _LegacySGD(0.1).create(PARAMS, focus=optim.ModelParamTraversal(
      lambda path, _: 'kernel' in path))
  focused = focused.apply_gradient(grads)
  np.testing.assert_allclose(focused.target['dense']['bias'], 0.)
  np.testing.assert_allclose(focused.target['dense']['kernel'], 0.9)


class _ClippedAdam(optim.Adam):
  """A 2020-style tweak of a built-in rule: override the per-leaf hook and
  call the legacy rule through super()."""

  def apply_param_gradient(self, step, hyper_params, param, state, grad):
    return super().apply_param_gradient(step, hyper_params, param, state,
                                        jnp.clip(grad, -0.1, 0.1))


class _OnesMomentum(optim.Momentum):

  def init_param_state(self, param):
    return optim._MomentumParamState(jnp.ones_like(param))


def test_subclass_of_builtin_keeps_its_hook_overrides():
  grads = jax.tree_util.tree_map(lambda p: jnp.full_like(p, 5.), PARAMS)
  clipped = jax.jit(lambda o, g: o.apply_gradient(g))(
      _ClippedAdam(0.1).create(PARAMS), grads)
  ref = optim.Adam(0.1).create(PARAMS).apply_gradient(
      jax.tree_util.tree_map(lambda g: jnp.clip(g, -0.1, 0.1), grads))
  np.testing.assert_allclose(clipped.target['dense']['kernel'],
                             ref.target['dense']['kernel'], rtol=1e-6)
  np.testing.assert_allclose(
      clipped.state.param_states['dense']['bias'].grad_ema, 0.01, rtol=1e-6)
  ones = _OnesMomentum(0.1, beta=0.5).create(PARAMS)
  np.testing.assert_array_equal(
      ones.state.param_states['dense']['kernel'].momentum, 1.)
  new = ones.apply_gradient(jax.tree_util.tree_map(jnp.zeros_like, PARAMS))
  np.testing.assert_allclose(new.state.param_states['dense']['kernel']
                             .momentum, 0.5)


def test_abstract_hooks_raise():
  with pytest.raises(NotImplementedError):
    optim.OptimizerDef(None).init_param_state(jnp.ones(2))
  with pytest.raises(NotImplementedError):
    optim.OptimizerDef(None).apply_param_gradient(0, None, 1., 1., 1.)


# --------------------------------------------------------------------------
# compute_gradient / optimize (deprecated)
# --------------------------------------------------------------------------


def test_compute_gradient_and_optimize():
  optimizer = optim.GradientDescent(0.5).create(jnp.asarray(2.))
  with pytest.warns(DeprecationWarning, match=r'^compute_gradient\(\) will '
                    'be removed soon.'):
    loss, grad = optimizer.compute_gradient(lambda x: x ** 2)
  assert (float(loss), float(grad)) == (4., 4.)
  with pytest.warns(DeprecationWarning, match='compute_gradient'):
    loss, aux, grad = optimizer.compute_gradients(lambda x: (3 * x, 'aux'))
  assert (float(loss), aux, float(grad)) == (6., 'aux', 3.)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    new, loss = optimizer.optimize(lambda x: x ** 2, learning_rate=0.25)
  messages = [str(w.message) for w in caught]
  assert any(m.startswith('optimize() will be removed soon.')
             for m in messages)
  assert float(new.target) == 1.  # 2 - 0.25 * 4
  new, loss, aux = optimizer.optimize(lambda x: (x ** 2, x + 1))
  assert float(new.target) == 0. and float(aux) == 3.


# --------------------------------------------------------------------------
# Pytree and serialization (spec §2.3, §3)
# --------------------------------------------------------------------------


def _dense_model():
  _, params = nn.Dense.init_by_shape(jax.random.PRNGKey(0),
                                     [((1, 1), jnp.float32)], features=1)
  params = {'kernel': jnp.ones((1, 1)), 'bias': jnp.zeros((1,))}
  assert set(params) == {'kernel', 'bias'}
  return nn.Model(nn.Dense.partial(features=1), params)


def test_serialization_layout_legacy_serialization_test():
  # tests/serialization_test.py (v0.2, 0.3.0): exact layout, then restore.
  optimizer = optim.Momentum(learning_rate=1.).create(_dense_model())
  sd = serialization.to_state_dict(optimizer)
  expected = {
      'target': {'params': {'kernel': np.ones((1, 1)),
                            'bias': np.zeros((1,))}},
      'state': {'step': 0, 'param_states': {'params': {
          'kernel': {'momentum': np.zeros((1, 1))},
          'bias': {'momentum': np.zeros((1,))}}}},
  }
  assert jax.tree_util.tree_structure(sd) == jax.tree_util.tree_structure(
      expected)
  for a, b in zip(jax.tree_util.tree_leaves(sd),
                  jax.tree_util.tree_leaves(expected)):
    np.testing.assert_array_equal(a, b)
  plus_one = jax.tree_util.tree_map(lambda x: x + 1, sd)
  restored = serialization.from_state_dict(optimizer, plus_one)
  chex_equal(restored, jax.tree_util.tree_map(lambda x: x + 1, optimizer))
  assert restored.optimizer_def is optimizer.optimizer_def
  # msgpack round trip
  back = serialization.from_bytes(optimizer, serialization.to_bytes(optimizer))
  chex_equal(back, optimizer)


def test_optimizer_is_a_pytree():
  optimizer = optim.Adam(0.1).create(PARAMS)
  leaves = jax.tree_util.tree_leaves(optimizer)
  # state first (step, then per leaf grad_ema, grad_sq_ema), then target.
  assert len(leaves) == 1 + 2 * 2 + 2
  assert leaves[0].dtype == jnp.int32
  assert leaves[1].shape == (3,)  # bias grad_ema ('bias' < 'kernel')
  step = jax.jit(lambda o, g: o.apply_gradient(g))
  new = step(optimizer, PARAMS)
  assert new.optimizer_def is optimizer.optimizer_def
  # imagenet: tree_map over the new and the old optimizer
  kept = jax.tree_util.tree_map(lambda a, b: jnp.where(False, a, b), new,
                                optimizer)
  chex_equal(kept, optimizer)
  # A state that came out of jit compares equal to an explicit one.
  scalars = {'a': jnp.ones((1,)), 'b': {'c': jnp.ones((1,))}}
  zero = step(optim.Momentum(0.1).create(scalars),
              jax.tree_util.tree_map(jnp.zeros_like, scalars))
  assert zero.state == optim.OptimizerState(1, {
      'a': optim._MomentumParamState(np.zeros((1,))),
      'b': {'c': optim._MomentumParamState(np.zeros((1,)))}})
  assert zero.state.replace(step=5).step == 5


def test_rmsprop_restores_v02_state_dict_without_mg():
  optimizer = optim.RMSProp(0.1).create(PARAMS)
  sd = serialization.to_state_dict(optimizer)
  for leaf in sd['state']['param_states']['dense'].values():
    del leaf['mg']
    leaf['v'] = leaf['v'] + 2.
  restored = serialization.from_state_dict(optimizer, sd)
  state = restored.state.param_states['dense']['kernel']
  assert state.mg is None
  np.testing.assert_allclose(state.v, 2.)
  # A centered template needs mg.
  centered = optim.RMSProp(0.1, centered=True).create(PARAMS)
  with pytest.raises(KeyError):
    serialization.from_state_dict(centered, sd)


def test_legacy_dataclasses_constructed_positionally():
  # v0.2 tests build RMSProp's dataclasses with the pre-0.3 arity.
  assert optim._RMSPropHyperParams(0.1, 0.9, 0.01) == \
      optim._RMSPropHyperParams(0.1, 0.9, 0.01, False)
  assert optim._RMSPropParamState(1.).mg is None
  assert optim.OptimizerState(0, ()).replace(step=1) == \
      optim.OptimizerState(1, ())
