"""Legacy flax.nn layers: they cost what linen costs, and keep legacy semantics.

* Lowering: a layer that borrows linen's arithmetic (flaxlegacy/nn/_linen_ops,
  linen.dot_product_attention, linen.pooling) traces to the *same jaxpr* as the
  linen layer's ``apply`` fed the same parameters, so under jit it compiles to
  the same HLO; the layers written out (normalisations) have linen's
  operations minus the variance clip.
* Legacy-only behaviour that linen lacks (Embed clamping, unclipped variance,
  GroupNorm param shapes, multi-axis attention, legacy masks, the decoding
  Cache, pooling pads, recurrent composition) against small oracles.
* dtype policy (spec 2.16) and errors (type and message, module path).

Numbers against real legacy Flax are in test_conformance.py (modules,
mnist_cnn, resnet_stateful traces).
"""

import collections

from flax import linen
import jax
from jax import random
import jax.numpy as jnp
import numpy as np
import pytest

from flaxlegacy import nn

K0 = random.PRNGKey(0)


def _jaxpr(fn, *args):
  return str(jax.make_jaxpr(fn)(*args))


def _x(*shape, seed=0):
  return jnp.asarray(np.random.RandomState(seed).normal(size=shape),
                     jnp.float32)


# --- lowering: same jaxpr as the linen layer --------------------------------

def _module_case(legacy, linen_module, inputs, **kw):
  """(legacy fn, linen fn, args) over the params legacy init creates."""
  _, params = legacy.init(K0, *inputs, **kw)

  def run_legacy(p, *xs):
    return legacy.call(p, *xs, **kw)

  def run_linen(p, *xs):
    return linen_module.apply({'params': p}, *xs)

  return run_legacy, run_linen, (params,) + tuple(inputs)


def _attend_case():
  _, params = nn.Embed.init(K0, jnp.arange(3), num_embeddings=5, features=4)
  q = _x(2, 4)
  return (lambda p, q: nn.Model(nn.Embed, p).attend(q),
          lambda p, q: linen.Embed(5, 4).apply({'params': p}, q,
                                               method='attend'),
          (params, q))


def _function_case(legacy_fn, linen_fn, *args):
  return legacy_fn, linen_fn, args


def _carry(batch, size):
  return (_x(batch, size, seed=1), _x(batch, size, seed=2))


LOWERING_CASES = {
    'dense': lambda: _module_case(nn.Dense, linen.Dense(5), [_x(3, 4)],
                                  features=5),
    'dense_nobias_3d': lambda: _module_case(
        nn.Dense, linen.Dense(5, use_bias=False), [_x(2, 3, 4)], features=5,
        bias=False),
    'dense_general': lambda: _module_case(
        nn.DenseGeneral, linen.DenseGeneral((2, 3), axis=(-2, -1)),
        [_x(2, 4, 5)], features=(2, 3), axis=(-2, -1)),
    'dense_general_batch_dims': lambda: _module_case(
        nn.DenseGeneral, linen.DenseGeneral(3, axis=-1, batch_dims=(0,)),
        [_x(2, 4, 5)], features=3, batch_dims=(0,)),
    'conv_same': lambda: _module_case(
        nn.Conv, linen.Conv(4, (3, 3)), [_x(2, 6, 6, 3)], features=4,
        kernel_size=(3, 3)),
    'conv_explicit_strided_dilated': lambda: _module_case(
        nn.Conv, linen.Conv(4, (3, 3), strides=(2, 1),
                            padding=[(1, 2), (0, 1)], kernel_dilation=(1, 2)),
        [_x(2, 7, 7, 3)], features=4, kernel_size=(3, 3), strides=(2, 1),
        padding=[(1, 2), (0, 1)], kernel_dilation=(1, 2)),
    'conv_grouped_1d_int_kernel': lambda: _module_case(
        nn.Conv, linen.Conv(4, (3,), padding='VALID', feature_group_count=2),
        [_x(2, 8, 4)], features=4, kernel_size=3, padding='VALID',
        feature_group_count=2),
    'conv_unbatched': lambda: _module_case(
        nn.Conv, linen.Conv(4, (3,)), [_x(8, 3)], features=4,
        kernel_size=(3,)),
    'conv_3d_input_dilation': lambda: _module_case(
        # JAX now rejects string padding with input dilation; legacy's JAX
        # turned it into explicit pads (zeros for 'VALID').
        nn.Conv, linen.Conv(2, (2, 2, 2), input_dilation=(2, 1, 1),
                            padding=[(0, 0)] * 3),
        [_x(1, 4, 4, 4, 2)], features=2, kernel_size=(2, 2, 2),
        input_dilation=(2, 1, 1), padding='VALID'),
    'conv_list_padding_pairs': lambda: _module_case(
        nn.Conv, linen.Conv(4, (3, 3), padding=[(1, 2), (0, 1)]),
        [_x(2, 6, 6, 3)], features=4, kernel_size=(3, 3),
        padding=[[1, 2], [0, 1]]),
    'conv_transpose_1d_valid_unbatched': lambda: _module_case(
        nn.ConvTranspose, linen.ConvTranspose(4, (3,), padding='VALID'),
        [_x(8, 3)], features=4, kernel_size=3, padding='VALID'),
    'conv_transpose': lambda: _module_case(
        nn.ConvTranspose, linen.ConvTranspose(4, (3, 3), strides=(2, 2)),
        [_x(2, 5, 5, 3)], features=4, kernel_size=(3, 3), strides=(2, 2)),
    'embed_attend': _attend_case,
    'avg_pool': lambda: _function_case(
        lambda x: nn.avg_pool(x, (3, 3), strides=(2, 2), padding='SAME'),
        lambda x: linen.avg_pool(x, (3, 3), strides=(2, 2), padding='SAME'),
        _x(2, 7, 7, 2)),
    'max_pool_explicit': lambda: _function_case(
        lambda x: nn.max_pool(x, (2, 2), padding=((1, 1), (0, 1))),
        lambda x: linen.max_pool(x, (2, 2), padding=((1, 1), (0, 1))),
        _x(2, 7, 7, 2)),
    'dot_product_attention_1d': lambda: _function_case(
        lambda q, k, v, b: nn.dot_product_attention(q, k, v, bias=b),
        lambda q, k, v, b: linen.dot_product_attention(
            q, k, v, bias=b, dtype=jnp.float32),
        _x(2, 6, 2, 4), _x(2, 5, 2, 4, seed=1), _x(2, 5, 2, 4, seed=2),
        _x(2, 1, 6, 5, seed=3)),
    'self_attention': lambda: _module_case(
        nn.SelfAttention, linen.MultiHeadDotProductAttention(2), [_x(2, 6, 8)],
        num_heads=2),
    'cross_attention_out_features': lambda: _module_case(
        nn.MultiHeadDotProductAttention,
        linen.MultiHeadDotProductAttention(2, qkv_features=4,
                                           out_features=3),
        [_x(2, 6, 8), _x(2, 5, 8, seed=1)], num_heads=2, qkv_features=4,
        out_features=3),
    'lstm': lambda: _module_case(nn.LSTMCell, linen.LSTMCell(5),
                                 [_carry(2, 5), _x(2, 3)]),
    'optimized_lstm': lambda: _module_case(
        nn.OptimizedLSTMCell, linen.OptimizedLSTMCell(5),
        [_carry(2, 5), _x(2, 3)]),
    'gru': lambda: _module_case(nn.GRUCell, linen.GRUCell(5),
                                [_x(2, 5, seed=1), _x(2, 3)]),
    'conv_lstm': lambda: _module_case(
        nn.ConvLSTM, linen.ConvLSTMCell(3, (3, 3)),
        [(_x(2, 5, 5, 3, seed=1), _x(2, 5, 5, 3, seed=2)), _x(2, 5, 5, 2)],
        features=3, kernel_size=(3, 3)),
}


@pytest.mark.parametrize('case', sorted(LOWERING_CASES))
def test_lowers_to_the_linen_computation(case):
  legacy_fn, linen_fn, args = LOWERING_CASES[case]()
  assert _jaxpr(legacy_fn, *args) == _jaxpr(linen_fn, *args)
  np.testing.assert_array_equal(
      jax.tree_util.tree_leaves(jax.jit(legacy_fn)(*args)),
      jax.tree_util.tree_leaves(jax.jit(linen_fn)(*args)))


def _primitives(fn, *args):
  return collections.Counter(
      e.primitive.name for e in jax.make_jaxpr(fn)(*args).jaxpr.eqns)


def _batch_norm_case():
  x = _x(4, 3, 3, 8)
  with nn.stateful() as state:
    _, params = nn.BatchNorm.init(K0, x)

  def run_legacy(p, s, x):
    with nn.stateful(s) as new_state:
      y = nn.BatchNorm.call(p, x)
    return y, new_state

  stats = {'mean': state['/']['mean'], 'var': state['/']['var']}
  layer = linen.BatchNorm(use_running_average=False)
  return (run_legacy, params, state,
          lambda p, s, x: layer.apply({'params': p, 'batch_stats': s}, x,
                                      mutable=['batch_stats']),
          params, stats, x)


def _group_norm_case():
  x = _x(2, 4, 4, 8)
  _, params = nn.GroupNorm.init(K0, x, num_groups=4)
  flat = jax.tree_util.tree_map(lambda a: a.reshape(-1), params)
  return (lambda p, x: nn.GroupNorm.call(p, x, num_groups=4), params,
          lambda p, x: linen.GroupNorm(4).apply({'params': p}, x), flat, x)


def _layer_norm_case():
  x = _x(2, 5, 6)
  _, params = nn.LayerNorm.init(K0, x)
  return (lambda p, x: nn.LayerNorm.call(p, x), params,
          lambda p, x: linen.LayerNorm().apply({'params': p}, x), params, x)


_SHAPE_OPS = {'reshape', 'broadcast_in_dim'}


@pytest.mark.parametrize('make', [_batch_norm_case, _group_norm_case,
                                  _layer_norm_case],
                         ids=['batch_norm', 'group_norm', 'layer_norm'])
def test_normalization_costs_linen_minus_the_variance_clip(make):
  case = make()
  x = case[-1]
  if len(case) == 7:  # BatchNorm carries its state argument.
    legacy_fn, p, s, linen_fn, lp, ls, _ = case
    ours = _primitives(legacy_fn, p, s, x)
    theirs = _primitives(linen_fn, lp, ls, x)
  else:
    legacy_fn, p, linen_fn, lp, _ = case
    ours = _primitives(legacy_fn, p, x)
    theirs = _primitives(linen_fn, lp, x)
  assert set(ours - theirs) <= _SHAPE_OPS, ours - theirs
  assert set(theirs - ours) <= _SHAPE_OPS | {'max'}, theirs - ours
  assert (theirs - ours)['max'] == 1  # linen's clip of E[x^2] - E[x]^2
  assert sum(ours.values()) < sum(theirs.values())


# --- whole models: the 2020 MNIST CNN, forward and gradient -----------------

class _LegacyCNN(nn.Module):

  def apply(self, x):
    x = nn.Conv(x, features=8, kernel_size=(3, 3))
    x = nn.relu(x)
    x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
    x = x.reshape((x.shape[0], -1))
    x = nn.Dense(x, features=16)
    x = nn.relu(x)
    x = nn.Dense(x, features=10)
    return nn.log_softmax(x)


class _LinenCNN(linen.Module):

  @linen.compact
  def __call__(self, x):
    x = linen.Conv(features=8, kernel_size=(3, 3))(x)
    x = linen.relu(x)
    x = linen.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
    x = x.reshape((x.shape[0], -1))
    x = linen.Dense(features=16)(x)
    x = linen.relu(x)
    x = linen.Dense(features=10)(x)
    return linen.log_softmax(x)


def test_legacy_cnn_train_step_traces_like_the_linen_port():
  x = _x(4, 8, 8, 1)
  _, params = _LegacyCNN.init(K0, x)
  # Same tree under linen's auto-names (Conv_0, Dense_1 ... -> Conv_0,
  # Dense_0 ...).
  linen_params = {'Conv_0': params['Conv_0'], 'Dense_0': params['Dense_1'],
                  'Dense_1': params['Dense_2']}

  def legacy_loss(p, x):
    return -jnp.mean(nn.Model(_LegacyCNN, p)(x)[:, 0])

  def linen_loss(p, x):
    return -jnp.mean(_LinenCNN().apply({'params': p}, x)[:, 0])

  # Flattened in the same order (sorted names map one to one), so the
  # gradient computations must be the same jaxpr.
  assert (_jaxpr(jax.grad(legacy_loss), params, x) ==
          _jaxpr(jax.grad(linen_loss), linen_params, x))
