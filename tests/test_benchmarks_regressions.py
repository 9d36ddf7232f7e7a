"""Regression tests for costs the benchmarks found (not timings).

* Initialisation must not leave arrays behind: initializers that ran under
  JAX's compile-time evaluation made the random-bit counters of every
  parameter shape constants of cached jaxprs (about twice the parameters'
  size, kept until ``jax.clear_caches()``); linen's init keeps nothing.
* The data-dependent initializer path (an initializer reading the traced
  input of ``init_by_shape``) still works after that fix.
"""

import gc

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flax import nn


class _Net(nn.Module):

  def apply(self, x, features=96):
    x = nn.Conv(x, features=8, kernel_size=(3, 3))
    x = nn.BatchNorm(x, momentum=0.9)
    x = x.reshape((x.shape[0], -1))
    return nn.Dense(x, features=features)


def _live_bytes():
  gc.collect()
  return sum(x.nbytes for x in jax.live_arrays())


def _init_by_shape(key, features=96):
  with nn.stateful() as state:
    _, params = _Net.partial(features=features).init_by_shape(
        key, [((1, 12, 12, 3), jnp.float32)])
  return params, state.as_dict()


def _init(key, features=96):
  with nn.stateful() as state:
    _, params = _Net.partial(features=features).init(
        key, jnp.ones((1, 12, 12, 3)))
  return params, state.as_dict()


@pytest.mark.parametrize('init,features', [(_init_by_shape, 97), (_init, 98)],
                         ids=['init_by_shape', 'init'])
def test_init_retains_no_arrays(init, features):
  # Shapes of their own: JAX's caches are per shape, and a shape another
  # test initialised first would hide a leak here.
  key = jax.random.PRNGKey(0)
  before = _live_bytes()
  params, state = init(key, features)
  param_bytes = sum(x.nbytes for x in jax.tree_util.tree_leaves(params))
  assert param_bytes > 400_000  # the Dense kernel dominates
  del params, state
  # Before the fix ~2x param_bytes of uint32 counters stayed alive.
  assert _live_bytes() - before < 1024


@pytest.mark.parametrize('init', [_init_by_shape, _init],
                         ids=['init_by_shape', 'init'])
def test_init_values_equal_plain_eager_initializers(init):
  """Parameters equal the initializers called eagerly on the legacy keys."""
  key = jax.random.PRNGKey(3)
  params, _ = init(key)
  expect = _init_by_shape(key)[0]
  for a, b in zip(jax.tree_util.tree_leaves(params),
                  jax.tree_util.tree_leaves(expect)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  # The Dense kernel is lecun_normal at the module's folded key.
  from flaxlegacy.nn import base  # pylint: disable=g-import-not-at-top
  dense_key = base._fold_in_str(  # pylint: disable=protected-access
      base._fold_in_str(key, 'Dense_2'), 'kernel')  # pylint: disable=protected-access
  kernel = nn.initializers.lecun_normal()(dense_key, (1152, 96))
  np.testing.assert_array_equal(np.asarray(params['Dense_2']['kernel']),
                                np.asarray(kernel))


class _DataDependent(nn.Module):

  def apply(self, x):
    scale = self.param('scale', (), lambda rng, shape: jnp.std(x))
    bias = self.param('bias', (3,), nn.initializers.zeros)
    return x * scale + bias


def test_data_dependent_initializer_under_init_by_shape():
  out, params = _DataDependent.init_by_shape(
      jax.random.PRNGKey(0), [((2, 3), jnp.float32)])
  # Computed from the abstract input: a shape, as legacy's partial eval gave.
  assert isinstance(params['scale'], jax.ShapeDtypeStruct)
  assert params['scale'].shape == ()
  np.testing.assert_array_equal(np.asarray(params['bias']), np.zeros(3))
  assert isinstance(out, jax.ShapeDtypeStruct) and out.shape == (2, 3)
  # With a concrete input the same module initialises concretely.
  x = jnp.arange(6.).reshape((2, 3))
  _, params = _DataDependent.init(jax.random.PRNGKey(0), x)
  np.testing.assert_allclose(np.asarray(params['scale']), np.std(np.arange(6.)),
                             rtol=1e-6)


def _lowered_steps(build):
  """Lowered StableHLO of the legacy step and its linen port, both as
  functions of the same flat arguments (benchmarks/models.flat_step)."""
  import os  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))
  from benchmarks import models  # pylint: disable=g-import-not-at-top
  texts = {}
  for variant in ('legacy', 'linen'):
    step, state, batch = build(models, variant)
    fn, args = models.flat_step(variant, step, state, batch)
    texts[variant] = jax.jit(fn).lower(*args).as_text()
  return texts


def test_mnist_train_step_lowers_to_linen_optax_program():
  """The legacy MNIST step (nn.Model + optim.Momentum) and its linen +
  TrainState + optax port lower to the same StableHLO text: identical
  programs cost the same."""
  from benchmarks import programs  # pylint: disable=g-import-not-at-top
  texts = _lowered_steps(lambda models, v: models.build_cnn(v, 4))
  # 2 forward, 2 kernel gradients, 1 input gradient
  assert programs.op_counts(texts['legacy'])['convolution'] == 5
  assert (programs.canonical_stablehlo(texts['legacy']) ==
          programs.canonical_stablehlo(texts['linen']))


def test_resnet_train_step_is_linen_minus_the_variance_clip():
  """With BatchNorm, the legacy step has linen's operations except those of
  linen's clip of the variance (and its gradient): nothing extra."""
  from benchmarks import programs  # pylint: disable=g-import-not-at-top
  texts = _lowered_steps(lambda models, v: models.build_resnet(
      v, 2, 'resnet_tiny', 8, 4))
  legacy = programs.op_counts(texts['legacy'])
  linen = programs.op_counts(texts['linen'])
  assert not legacy - linen, legacy - linen
  clip_ops = {'maximum', 'compare', 'select', 'divide', 'multiply',
              'broadcast_in_dim', 'constant'}
  assert set(linen - legacy) <= clip_ops, linen - legacy
  n_batch_norms = 6  # init_bn, 2 blocks x 2, 1 projection
  assert (linen - legacy)['maximum'] == n_batch_norms
