"""MultiOptimizer (both legacy state layouts), create(focus=...) and
ModelParamTraversal over nn.Model, dict and FrozenDict."""

import os
import subprocess
import sys
import warnings

from flax import serialization
from flax import traverse_util
from flax.core import FrozenDict
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flax import nn  # legacy API
from flax import optim  # legacy API
from flaxlegacy.optim import _multi

KERNELS = optim.ModelParamTraversal(lambda path, _: 'kernel' in path)
BIASES = optim.ModelParamTraversal(lambda path, _: 'bias' in path)


def _params():
  return {'x': {'kernel': jnp.full((2,), 1.), 'bias': jnp.full((2,), 2.),
                'y': {'kernel': jnp.full((2,), 3.), 'bias': jnp.full((2,), 4.)}},
          'z': {}}


class _Identity(nn.Module):

  def apply(self, x):
    return x


# --------------------------------------------------------------------------
# ModelParamTraversal
# --------------------------------------------------------------------------


@pytest.mark.parametrize('wrap', ['model', 'dict', 'frozendict'])
def test_param_selection(wrap):
  params = _params()
  inputs = {'model': lambda p: nn.Model(_Identity, p), 'dict': lambda p: p,
            'frozendict': FrozenDict}[wrap](params)
  seen = []

  def kernels(path, _):
    seen.append(path)
    return 'kernel' in path

  traversal = optim.ModelParamTraversal(kernels)
  values = [float(v[0]) for v in traversal.iterate(inputs)]
  assert values == [1., 3.]
  assert seen == ['/x/bias', '/x/kernel', '/x/y/bias', '/x/y/kernel']
  updated = traversal.update(lambda v: v + v, inputs)
  assert type(updated) is type(inputs)  # pylint: disable=unidiomatic-typecheck
  new = updated.params if wrap == 'model' else updated
  assert float(new['x']['kernel'][0]) == 2.
  assert float(new['x']['y']['kernel'][0]) == 6.
  assert float(new['x']['bias'][0]) == 2.
  assert new['z'] == {}  # empty sub-dicts survive (0.3.0+)


def test_traversal_rejects_other_inputs():
  with pytest.raises(ValueError, match='Can only traverse a flax Model '
                     "instance or a nested dict, not <class 'list'>"):
    list(KERNELS.iterate([]))


def test_legacy_traversal_does_not_warn():
  with warnings.catch_warnings():
    warnings.simplefilter('error')
    optim.ModelParamTraversal(lambda p, v: True)


def test_flax_traversal_over_model_in_multi_optimizer():
  # v0.3.5+ code builds flax.traverse_util.ModelParamTraversal, which no
  # longer knows nn.Model; MultiOptimizer re-makes it as ours.
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', DeprecationWarning)
    modern = traverse_util.ModelParamTraversal(lambda p, _: 'kernel' in p)
  model = nn.Model(_Identity, _params())
  optimizer = optim.GradientDescent(1.).create(model, focus=modern)
  grads = jax.tree_util.tree_map(jnp.ones_like, model)
  new = optimizer.apply_gradient(grads)
  assert float(new.target.params['x']['kernel'][0]) == 0.
  assert float(new.target.params['x']['bias'][0]) == 2.


# --------------------------------------------------------------------------
# Tree layout (v0.3.3+, the default)
# --------------------------------------------------------------------------


def test_focus_tree_layout():
  params = {'a': 0., 'b': 0.}
  optimizer = optim.GradientDescent(1.).create(
      params, focus=traverse_util.t_identity['a'])
  assert optimizer.optimizer_def.layout == 'tree'
  assert optimizer.state == optim.OptimizerState(0, {'a': (), 'b': None})
  new = optimizer.apply_gradient({'a': -1., 'b': -2.})
  assert new.state == optim.OptimizerState(1, {'a': (), 'b': None})
  assert new.target == {'a': 1., 'b': 0.}


def test_multi_optimizer_tree_layout_and_overrides():
  model = nn.Model(_Identity, _params())
  opt_def = optim.MultiOptimizer((KERNELS, optim.Adam(0.1)),
                                 (BIASES, optim.GradientDescent(1.)))
  assert opt_def.hyper_params == [optim._AdamHyperParams(0.1, 0.9, 0.999,
                                                         1e-8, 0.0),
                                  optim._GradientDescentHyperParams(1.)]
  optimizer = opt_def.create(model)
  states = optimizer.state.param_states.params
  assert isinstance(states['x']['kernel'], optim._AdamParamState)
  assert states['x']['bias'] == () and states['z'] == {}
  grads = jax.tree_util.tree_map(jnp.ones_like, model)
  step = jax.jit(lambda o, g, lr: o.apply_gradient(g, learning_rate=lr))
  new = step(optimizer, grads, 0.5)
  # learning_rate applies to every sub-optimizer
  np.testing.assert_allclose(new.target.params['x']['bias'], 1.5)
  np.testing.assert_allclose(new.target.params['x']['kernel'], 0.5,
                             rtol=1e-5)
  assert int(new.state.step) == 1
  # per-optimizer schedules: hyper_params=[...]
  hps = optimizer.optimizer_def.hyper_params
  new = optimizer.apply_gradient(grads, hyper_params=[
      hps[0].replace(learning_rate=0.), hps[1].replace(learning_rate=3.)])
  np.testing.assert_allclose(new.target.params['x']['kernel'], 1.)
  np.testing.assert_allclose(new.target.params['x']['y']['bias'], 1.)
  with pytest.raises(TypeError, match="GradientDescent has no "
                     "hyper-parameter\\(s\\) 'beta1'"):
    optimizer.apply_gradient(grads, beta1=0.5)


def test_overlapping_traversals_rejected():
  params = {'a': {'x': 0., 'y': 0.}, 'b': {'y': 0, 'z': 0.}}
  t_a = optim.ModelParamTraversal(
      lambda path, _: path.endswith('/x') or path.endswith('/y'))
  t_b = optim.ModelParamTraversal(
      lambda path, value: value.dtype == jnp.int32 or path.endswith('/z'))
  opt_def = optim.MultiOptimizer((t_a, optim.GradientDescent(1.)),
                                 (t_b, optim.GradientDescent(10.)))
  with pytest.raises(ValueError, match=r"Multiple optimizers match the same "
                     r"leaves : .*'y': \[0, 1\]"):
    jax.jit(opt_def.init_state)(params)


def test_weight_norm_as_sub_optimizer():
  params = {'w': jnp.full((2, 2), 2.), 'b': jnp.zeros((2,))}
  kernels = optim.ModelParamTraversal(lambda path, _: path == '/w')
  opt_def = optim.MultiOptimizer(
      (kernels, optim.WeightNorm(optim.Momentum(0.1))))
  optimizer = opt_def.create(params)
  new = optimizer.apply_gradient(jax.tree_util.tree_map(jnp.ones_like,
                                                        params))
  np.testing.assert_allclose(new.target['w'], 1.9, rtol=1e-6)
  np.testing.assert_allclose(new.state.param_states['w'].mult,
                             1.9 * 2 ** 0.5, rtol=1e-6)
  assert new.state.param_states['b'] is None


# --------------------------------------------------------------------------
# List layout (v0.1.0rc2 - v0.3.2) and conversions
# --------------------------------------------------------------------------


def test_focus_list_layout():
  params = {'a': 0., 'b': 0.}
  opt_def = optim.MultiOptimizer(
      (traverse_util.t_identity['a'], optim.GradientDescent(1.)),
      layout='list')
  optimizer = optim.Optimizer(opt_def, opt_def.init_state(params), params)
  assert optimizer.state == [optim.OptimizerState(0, [()])]
  new = optimizer.apply_gradient({'a': -1., 'b': -2.})
  assert new.state == [optim.OptimizerState(1, [()])]
  assert new.target == {'a': 1., 'b': 0.}


def test_multi_optimizer_list_layout():
  params = {'a': 0., 'b': 0.}
  previous = optim.set_multi_optimizer_layout('list')
  try:
    opt_def = optim.MultiOptimizer(
        (traverse_util.t_identity['a'], optim.GradientDescent(1.)),
        (traverse_util.t_identity['b'], optim.GradientDescent(10.)))
  finally:
    optim.set_multi_optimizer_layout(previous)
  state = opt_def.init_state(params)
  assert state == [optim.OptimizerState(0, [()])] * 2
  new_params, new_state = opt_def.apply_gradient(
      opt_def.hyper_params, params, state, {'a': -1., 'b': -2.})
  assert new_params == {'a': 1., 'b': 20.}
  assert new_state == [optim.OptimizerState(1, [()])] * 2
  hp = opt_def.update_hyper_params(learning_rate=2.)
  new_params, _ = opt_def.apply_gradient(hp, params, state,
                                         {'a': -1., 'b': -2.})
  assert new_params == {'a': 2., 'b': 4.}


def test_layout_switch_validates():
  with pytest.raises(ValueError, match="MultiOptimizer layout must be one of "
                     r"\('tree', 'list'\), got 'flat'"):
    optim.set_multi_optimizer_layout('flat')
  with pytest.raises(ValueError, match='MultiOptimizer layout'):
    optim.MultiOptimizer((KERNELS, optim.Adam(0.1)), layout='nested')


def test_layout_from_environment():
  code = ('from flax import optim\n'
          'print(optim.MultiOptimizer((optim.ModelParamTraversal('
          'lambda p, v: True), optim.Adam(0.1))).layout)\n')
  env = dict(os.environ, FLAXLEGACY_MULTI_OPTIMIZER_LAYOUT='list',
             JAX_PLATFORMS='cpu')
  out = subprocess.run([sys.executable, '-c', code], env=env, check=True,
                       capture_output=True, text=True).stdout
  assert out.strip().splitlines()[-1] == 'list'


def _trained(layout, model):
  opt_def = optim.MultiOptimizer((KERNELS, optim.Momentum(0.1)),
                                 (BIASES, optim.Adam(0.1)), layout=layout)
  optimizer = opt_def.create(model)
  grads = jax.tree_util.tree_map(lambda x: x * 0.5, model)
  for _ in range(2):
    optimizer = optimizer.apply_gradient(grads)
  return optimizer


@pytest.mark.parametrize('source,dest', [('list', 'tree'), ('tree', 'list'),
                                         ('tree', 'tree'), ('list', 'list')])
def test_restore_accepts_either_layout(source, dest):
  model = nn.Model(_Identity, _params())
  trained = _trained(source, model)
  data = serialization.to_bytes(trained)
  sd = serialization.msgpack_restore(data)
  if source == 'list':
    assert set(sd['state']) == {'0', '1'}
    assert set(sd['state']['0']['param_states']) == {'0', '1'}
  else:
    assert set(sd['state']) == {'step', 'param_states'}
  template = optim.MultiOptimizer(
      (KERNELS, optim.Momentum(0.1)), (BIASES, optim.Adam(0.1)),
      layout=dest).create(model)
  restored = serialization.from_bytes(template, data)
  assert restored.optimizer_def is template.optimizer_def
  got = serialization.to_state_dict(restored)
  want = serialization.to_state_dict(_trained(dest, model))
  assert jax.tree_util.tree_structure(got) == \
      jax.tree_util.tree_structure(want)
  for a, b in zip(jax.tree_util.tree_leaves(got),
                  jax.tree_util.tree_leaves(want)):
    np.testing.assert_allclose(a, b, rtol=1e-6)
  # Training goes on from the restored state.
  restored.apply_gradient(jax.tree_util.tree_map(jnp.ones_like, model))


def test_shape_dtype_record_keeps_numpy_leaves():
  # Old JAX counted NumPy arrays as jnp.ndarray: a float64 NumPy leaf is
  # seen by filters as float64 (not converted).
  record = _multi._ShapeDtype.create(np.zeros((2,), np.float64))
  assert record.dtype == np.float64 and record.shape == (2,)
  assert _multi._ShapeDtype.create(0).dtype == jnp.int32
