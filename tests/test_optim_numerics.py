"""flax.optim numbers: every optimizer against the legacy Flax 0.3.5 traces
(driven in-process on a plain-dict target, no flax.nn), the legacy test
vectors, and the places where legacy differs from optax's aliases."""

import os

from flax import serialization
from flax import traverse_util
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flax import optim  # legacy API
from tests import conformance

# name -> (class, constructor kwargs, override at EXTRA_STEP); the table of
# shared/conformance/gen_optimizers.py.
OPTIMIZERS = {
    'sgd': ('GradientDescent', dict(learning_rate=0.1), {}),
    'momentum': ('Momentum', dict(learning_rate=0.1, beta=0.9),
                 dict(beta=0.5)),
    'momentum_nesterov': ('Momentum', dict(learning_rate=0.1, beta=0.9,
                                           nesterov=True), {}),
    'momentum_wd': ('Momentum', dict(learning_rate=0.1, beta=0.9,
                                     weight_decay=0.01),
                    dict(weight_decay=0.1)),
    'adam': ('Adam', dict(learning_rate=0.01), dict(beta1=0.5)),
    'adam_wd': ('Adam', dict(learning_rate=0.01, beta1=0.8, beta2=0.99,
                             eps=1e-6, weight_decay=0.1), {}),
    'adabelief': ('AdaBelief', dict(learning_rate=0.01), {}),
    'adadelta': ('Adadelta', dict(learning_rate=1.0, rho=0.9, eps=1e-6), {}),
    'adadelta_wd': ('Adadelta', dict(learning_rate=0.5, rho=0.95, eps=1e-5,
                                     weight_decay=0.01), {}),
    'adafactor': ('Adafactor', dict(learning_rate=0.1,
                                    min_dim_size_to_factor=4), {}),
    'adafactor_beta1_wd': ('Adafactor', dict(
        learning_rate=0.05, beta1=0.9, decay_rate=0.7,
        weight_decay_rate=0.01, clipping_threshold=None,
        multiply_by_parameter_scale=False, min_dim_size_to_factor=4), {}),
    'adafactor_unfactored': ('Adafactor', dict(learning_rate=0.3,
                                               factored=False), {}),
    'adagrad': ('Adagrad', dict(learning_rate=0.1), {}),
    'rmsprop': ('RMSProp', dict(learning_rate=0.01), dict(beta2=0.5)),
    'rmsprop_centered': ('RMSProp', dict(learning_rate=0.01, beta2=0.95,
                                         centered=True), {}),
    'lamb': ('LAMB', dict(learning_rate=0.01, weight_decay=0.01),
             dict(weight_decay=0.0)),
    'lars': ('LARS', dict(learning_rate=0.1, beta=0.9, weight_decay=0.01), {}),
    'lars_nesterov': ('LARS', dict(learning_rate=0.1, beta=0.8,
                                   weight_decay=0.001, trust_coefficient=0.01,
                                   eps=1e-6, nesterov=True), {}),
}
OVERRIDE_STEP, LR_FACTOR, EXTRA_STEP, STEPS = 4, 0.5, 7, 8
RTOL, ATOL = 1e-4, 1e-6


def _kernels(path, _):
  return 'kernel' in path


def _biases(path, _):
  return 'bias' in path


def _special():
  kernels = optim.ModelParamTraversal(_kernels)
  biases = optim.ModelParamTraversal(_biases)
  return {
      'weight_norm_momentum': (optim.WeightNorm(
          optim.Momentum(learning_rate=0.1, beta=0.9), wn_decay=0.001), 0.1,
                               None),
      'momentum_focus_kernels': (optim.Momentum(learning_rate=0.1, beta=0.9),
                                 0.1, kernels),
      'multi_adam_kernels_sgd_biases': (optim.MultiOptimizer(
          (kernels, optim.Adam(learning_rate=0.01)),
          (biases, optim.GradientDescent(learning_rate=0.1))), 0.05, None),
  }


@pytest.fixture(scope='module')
def reference(shared):  # pylint: disable=unused-argument
  return np.load(os.path.join(conformance.reference_dir(), 'optimizers.npz'))


def _mlp(params, x):
  h = jnp.tanh(x @ params['dense0']['kernel'] + params['dense0']['bias'])
  return h @ params['dense1']['kernel'] + params['dense1']['bias']


def _loss(target, x, y):
  return jnp.mean((_mlp(target['params'], x) - y) ** 2)


def _flat_state_dict(optimizer):
  flat = traverse_util.flatten_dict(serialization.to_state_dict(optimizer),
                                    sep='/')
  return {k: v for k, v in flat.items() if v is not None}


def _compare(reference, prefix, got):
  want = {k[len(prefix) + 1:]: reference[k] for k in reference.files
          if k.startswith(prefix + '/')}
  assert set(got) == set(want), (prefix, set(got) ^ set(want))
  for key, ref in want.items():
    cand = np.asarray(got[key])
    assert cand.shape == ref.shape and cand.dtype == ref.dtype, (prefix, key)
    bound = ATOL + RTOL * float(np.max(np.abs(ref))) if ref.size else 0.
    err = float(np.max(np.abs(cand.astype(np.float64) - ref))) \
        if ref.size else 0.
    assert err <= bound, f'{prefix}/{key}: max err {err:.3g} > {bound:.3g}'


def _run(reference, name, opt_def, base_lr, extra, focus=None):
  target = {'params': {
      layer: {leaf: jnp.asarray(reference[f'init/params/{layer}/{leaf}'])
              for leaf in ('kernel', 'bias')} for layer in ('dense0',
                                                            'dense1')}}
  xs, ys = reference['data/x'], reference['data/y']
  optimizer = opt_def.create(target, focus=focus)
  _compare(reference, f'opt/{name}/step_init', _flat_state_dict(optimizer)) \
      if f'opt/{name}/step_init/state/step' in reference.files else None

  def step(optimizer, x, y, lr, static, with_lr):
    loss, grad = jax.value_and_grad(_loss)(optimizer.target, x, y)
    overrides = dict(static)
    if with_lr:
      overrides['learning_rate'] = lr
    return optimizer.apply_gradient(grad, **overrides), loss

  cache = {}
  for k in range(STEPS):
    key = (tuple(sorted(extra.items())) if k == EXTRA_STEP else (),
           k == OVERRIDE_STEP)
    if key not in cache:
      cache[key] = jax.jit(lambda o, x, y, lr, key=key: step(
          o, x, y, lr, dict(key[0]), key[1]))
    optimizer, loss = cache[key](optimizer, xs[k], ys[k],
                                 jnp.float32(base_lr * LR_FACTOR))
    np.testing.assert_allclose(loss, reference[f'opt/{name}/loss'][k],
                               rtol=RTOL, atol=ATOL)
    _compare(reference, f'opt/{name}/step_{k}', _flat_state_dict(optimizer))


@pytest.mark.parametrize('name', sorted(OPTIMIZERS))
def test_optimizer_matches_legacy_trace(reference, name):
  cls, kwargs, extra = OPTIMIZERS[name]
  _run(reference, name, getattr(optim, cls)(**kwargs),
       kwargs['learning_rate'], extra)


@pytest.mark.parametrize('name', sorted(_special()))
def test_wrapped_and_multi_match_legacy_trace(reference, name):
  opt_def, lr, focus = _special()[name]
  _run(reference, name, opt_def, lr, {}, focus=focus)


def test_optimize_api_matches_legacy_trace(reference):
  target = {'params': {
      layer: {leaf: jnp.asarray(reference[f'init/params/{layer}/{leaf}'])
              for leaf in ('kernel', 'bias')} for layer in ('dense0',
                                                            'dense1')}}
  xs, ys = reference['data/x'], reference['data/y']
  optimizer = optim.Momentum(learning_rate=0.1, beta=0.9).create(target)
  with pytest.warns(DeprecationWarning):
    for k in range(4):
      overrides = {'learning_rate': 0.02} if k == 2 else {}
      optimizer, loss = optimizer.optimize(
          lambda t, k=k: _loss(t, xs[k], ys[k]), **overrides)
      np.testing.assert_allclose(loss, reference['optimize_api/loss'][k],
                                 rtol=RTOL)
      _compare(reference, f'optimize_api/step_{k}',
               _flat_state_dict(optimizer))
    loss, aux, grad = optimizer.compute_gradient(
        lambda t: (_loss(t, xs[0], ys[0]), _mlp(t['params'], xs[0])))
  np.testing.assert_allclose(loss, reference['compute_gradient/loss'],
                             rtol=RTOL)
  np.testing.assert_allclose(aux, reference['compute_gradient/aux'],
                             rtol=RTOL, atol=ATOL)
  _compare(reference, 'compute_gradient/grad', traverse_util.flatten_dict(
      serialization.to_state_dict(grad), sep='/'))


def test_dynamic_scale_matches_legacy_trace(reference):
  target = {'params': {
      layer: {leaf: jnp.asarray(reference[f'init/params/{layer}/{leaf}'])
              for leaf in ('kernel', 'bias')} for layer in ('dense0',
                                                            'dense1')}}
  xs, ys = reference['data/x'], reference['data/y']
  dyn = optim.DynamicScale(growth_interval=2)
  optimizer = optim.Adam(learning_rate=0.01).create(target)
  for k in range(4):
    dyn, is_fin, loss, grad = dyn.value_and_grad(
        lambda t, k=k: _loss(t, xs[k], ys[k]))(optimizer.target)
    optimizer = optimizer.apply_gradient(grad)
    prefix = f'dynamic_scale/step_{k}'
    assert float(dyn.scale) == float(reference[prefix + '/scale'])
    assert int(dyn.fin_steps) == int(reference[prefix + '/fin_steps'])
    assert bool(is_fin) == bool(reference[prefix + '/is_fin'])
    np.testing.assert_allclose(loss, reference[prefix + '/loss'], rtol=RTOL)
    _compare(reference, prefix + '/grad', traverse_util.flatten_dict(
        serialization.to_state_dict(grad), sep='/'))


# --------------------------------------------------------------------------
# Legacy test vectors (spec §8.2, re-derived in float64) and legacy-only
# behaviours that optax's aliases do not have.
# --------------------------------------------------------------------------

VECTORS = [
    # (definition, step, param, state, grad, new param, new state)
    (optim.Adam(0.1, 0.2, 0.9, 0.01, 0.0), 1, 1., (0.1, 0.9), 4., 0.906085,
     (3.22, 2.41)),
    (optim.Adagrad(0.1, 0.01), 1, 1., (0.1,), 4., 0.9005588, (16.1,)),
    (optim.RMSProp(0.1, 0.9, 0.01), 1, 1., (0.1, None), 4., 0.6946565,
     (1.69, None)),
    (optim.RMSProp(0.1, 0.9, 0.01, True), 1, 1., (0.1, 0.1), 4., 0.670543,
     (1.69, 0.49)),
    (optim.AdaBelief(0.1, 0.2, 0.9, 0.01, 0.0), 1, 1., (0.1, 0.9), 4.,
     0.8449397, (3.22, 0.88084)),
    (optim.Adadelta(0.1, 0.9, 1e-6, 0.1), 1, 1., (0., 0.), 1., 0.9896838,
     (0.1, 9.999902e-7)),
    (optim.Momentum(0.1, 0.2), 0, 1., (1.,), 3., 0.68, (3.2,)),
    (optim.GradientDescent(0.1), 0, 1., None, 3., 0.7, None),
]


@pytest.mark.parametrize('vector', VECTORS,
                         ids=[f'{type(v[0]).__name__}{i}'
                              for i, v in enumerate(VECTORS)])
def test_legacy_vectors(vector):
  opt_def, step, param, state, grad, new_param, new_state = vector
  cls = opt_def.param_state_cls
  leaf_state = () if state is None else cls(*[
      None if s is None else np.array([s]) for s in state])
  # apply_param_gradient with NumPy inputs, as the legacy tests call it.
  got_param, got_state = opt_def.apply_param_gradient(
      step, opt_def.hyper_params, np.array([param]), leaf_state,
      np.array([grad]))
  np.testing.assert_allclose(got_param, [new_param], rtol=1e-6)
  if new_state is None:
    assert got_state == ()
  else:
    for got, want in zip(jax.tree_util.tree_leaves(got_state),
                         [s for s in new_state if s is not None]):
      np.testing.assert_allclose(got, [want], rtol=1e-6)


def test_lamb_never_moves_a_zero_leaf():
  # Legacy ratio |p|/|u| is 0 for a zero leaf (optax's lamb uses 1).
  params = {'w': jnp.ones((3,)), 'b': jnp.zeros((3,))}
  optimizer = optim.LAMB(0.1).create(params)
  grads = {'w': jnp.full((3,), 0.5), 'b': jnp.full((3,), 0.5)}
  for _ in range(3):
    optimizer = optimizer.apply_gradient(grads)
  np.testing.assert_array_equal(optimizer.target['b'], 0.)
  assert float(optimizer.target['w'][0]) < 1.


def test_lars_ratio_uses_raw_gradient_norm():
  p, g = jnp.array([3., 4.]), jnp.array([0.6, 0.8])
  wd, tc, lr = 0.1, 0.01, 1.
  optimizer = optim.LARS(lr, beta=0., weight_decay=wd,
                         trust_coefficient=tc).create(p)
  new = optimizer.apply_gradient(g)
  ratio = tc * 5. / (1. + wd * 5.)  # |g| + wd |p|, not |g + wd p|
  np.testing.assert_allclose(new.target, p - lr * ratio * (g + wd * p),
                             rtol=1e-6)
  np.testing.assert_allclose(new.state.param_states.momentum,
                             lr * ratio * (g + wd * p), rtol=1e-6)
  # zero-norm guard (v0.2.2+, Decision D12): ratio 1
  zero = optim.LARS(lr, beta=0.).create(jnp.zeros(2)).apply_gradient(g)
  np.testing.assert_allclose(zero.target, -g, rtol=1e-6)


def test_adagrad_eps_outside_the_root():
  optimizer = optim.Adagrad(1., eps=1.).create(jnp.zeros(1))
  new = optimizer.apply_gradient(jnp.array([3.]))
  np.testing.assert_allclose(new.target, [-3. / (3. + 1.)], rtol=1e-6)


def test_adadelta_weight_decay_is_decoupled():
  optimizer = optim.Adadelta(1., rho=0.5, eps=1e-6,
                             weight_decay=0.1).create(jnp.ones(1))
  new = optimizer.apply_gradient(jnp.array([2.]))
  delta = np.sqrt(1e-6) / np.sqrt(0.5 * 4 + 1e-6) * 2.
  np.testing.assert_allclose(new.target, [1. - delta - 0.1], rtol=1e-5)


def test_traced_learning_rate_equals_python_value():
  params = {'w': jnp.array([1., -2.])}
  grads = {'w': jnp.array([0.3, 0.4])}
  for opt_def in (optim.Adam(), optim.Momentum(), optim.LARS(),
                  optim.Adafactor(), optim.LAMB()):
    optimizer = opt_def.create(params)
    a = jax.jit(lambda o, lr: o.apply_gradient(grads, learning_rate=lr))(
        optimizer, 0.05)
    b = optimizer.apply_gradient(grads, learning_rate=0.05)
    np.testing.assert_allclose(a.target['w'], b.target['w'], rtol=1e-6)


def test_dynamic_scale_float16_sequence():
  # The legacy DynamicScaleTest sequence (growth_interval=2, float16 loss).
  def loss_fn(p):
    return jnp.asarray(p, jnp.float16) ** 2

  dyn = optim.DynamicScale(growth_interval=2)
  step = jax.jit(lambda ds, p: ds.value_and_grad(loss_fn)(p))
  inf, nan = float('inf'), float('nan')
  expected = [(False, nan, 32768.0, inf), (False, 1.0, 16384.0, inf),
              (True, 1.0, 16384.0, 2.0), (True, 1.0, 16384.0, 2.0),
              (True, 1.0, 32768.0, 2.0), (False, 1.0, 16384.0, inf)]
  for want in expected:
    dyn, is_fin, loss, grad = step(dyn, jnp.array(1., jnp.float32))
    np.testing.assert_allclose(
        np.array((is_fin, loss, dyn.scale, grad), np.float64), want)
  assert set(serialization.to_state_dict(dyn)) == {'fin_steps', 'scale'}
