"""Legacy flax.nn layer semantics that linen does not share, dtype policy and
layer errors (spec legacy-nn.md 2.16, 3, trap list 4).

Oracles are small NumPy/lax expressions of the legacy formulas, or linen
where the spec says the function is the same after a reshaping."""

import os
import subprocess
import sys
import textwrap
import warnings

from flax import linen
import jax
from jax import lax
from jax import random
import jax.numpy as jnp
import numpy as np
import pytest

from flaxlegacy import nn

K0 = random.PRNGKey(0)


def _x(*shape, seed=0):
  return jnp.asarray(np.random.RandomState(seed).normal(size=shape),
                     jnp.float32)


def _ones_init(key, shape, dtype=jnp.float32):
  del key
  return jnp.ones(shape, dtype)


# --- re-exports ---------------------------------------------------------------

@pytest.mark.parametrize('name', [
    'celu', 'elu', 'gelu', 'glu', 'hard_sigmoid', 'hard_swish', 'hard_tanh',
    'leaky_relu', 'log_sigmoid', 'log_softmax', 'relu', 'relu6', 'selu',
    'sigmoid', 'silu', 'soft_sign', 'softmax', 'softplus', 'swish'])
def test_activations_are_the_jax_functions(name):
  assert getattr(nn.activation, name) is getattr(jax.nn, name)


def test_top_level_activations_and_tanh():
  assert nn.relu is jax.nn.relu and nn.silu is jax.nn.silu
  assert nn.tanh is jnp.tanh and nn.activation.tanh is jnp.tanh


INITIALIZER_CASES = [
    # (legacy factory call, JAX equivalent, shape)
    (lambda: nn.initializers.zeros, lambda: jax.nn.initializers.zeros, (2, 3)),
    (lambda: nn.initializers.ones, lambda: jax.nn.initializers.ones, (2, 3)),
    (lambda: nn.initializers.uniform(0.1),
     lambda: jax.nn.initializers.uniform(0.1), (2, 3)),
    (lambda: nn.initializers.normal(0.3),
     lambda: jax.nn.initializers.normal(0.3), (2, 3)),
    (lambda: nn.initializers.variance_scaling(2., 'fan_out', 'normal', 0, 1),
     lambda: jax.nn.initializers.variance_scaling(2., 'fan_out', 'normal', 0,
                                                  1), (3, 4)),
    (lambda: nn.initializers.lecun_normal(),
     lambda: jax.nn.initializers.lecun_normal(), (3, 4)),
    (lambda: nn.initializers.lecun_uniform(),
     lambda: jax.nn.initializers.lecun_uniform(), (3, 4)),
    (lambda: nn.initializers.xavier_normal(),
     lambda: jax.nn.initializers.glorot_normal(), (3, 4)),
    (lambda: nn.initializers.xavier_uniform(),
     lambda: jax.nn.initializers.glorot_uniform(), (3, 4)),
    (lambda: nn.initializers.kaiming_normal(),
     lambda: jax.nn.initializers.he_normal(), (3, 4)),
    (lambda: nn.initializers.kaiming_uniform(),
     lambda: jax.nn.initializers.he_uniform(), (3, 4)),
    (lambda: nn.initializers.orthogonal(2.),
     lambda: jax.nn.initializers.orthogonal(2.), (3, 4)),
    (lambda: nn.initializers.delta_orthogonal(),
     lambda: jax.nn.initializers.delta_orthogonal(), (3, 3, 4, 4)),
]


@pytest.mark.parametrize('legacy,modern,shape', INITIALIZER_CASES)
def test_initializers_draw_what_jax_draws_in_float32(legacy, modern, shape):
  np.testing.assert_array_equal(legacy()(K0, shape), modern()(K0, shape))
  assert legacy()(K0, shape).dtype == jnp.float32


def test_initializer_factories_keep_the_legacy_positional_dtype():
  init = nn.initializers.variance_scaling(1., 'fan_in', 'normal', -2, -1,
                                          jnp.bfloat16)
  assert init(K0, (3, 4)).dtype == jnp.bfloat16
  assert nn.initializers.lecun_normal(-2, -1, jnp.bfloat16)(
      K0, (3, 4)).dtype == jnp.bfloat16


def test_default_initializers():
  shape = (3, 4)
  np.testing.assert_array_equal(
      nn.linear.default_kernel_init(K0, shape),
      jax.nn.initializers.lecun_normal()(K0, shape))
  np.testing.assert_array_equal(
      nn.linear.default_embed_init(K0, shape),
      jax.nn.initializers.variance_scaling(1.0, 'fan_in', 'normal',
                                           out_axis=0)(K0, shape))


def test_normalize_is_the_unclipped_legacy_formula():
  x = _x(3, 5)
  mean = x.mean(-1, keepdims=True)
  var = (x * x).mean(-1, keepdims=True) - mean * mean
  np.testing.assert_allclose(nn.activation.normalize(x),
                             (x - mean) / np.sqrt(var + 1e-5), rtol=1e-5)
  # A constant row: E[x^2] - E[x]^2 rounds negative; legacy gave NaN where
  # jax.nn.standardize (clipped) is finite.
  c = jnp.full((7,), 777.77, jnp.float32)
  assert np.isnan(nn.activation.normalize(c)).all()
  assert np.isfinite(jax.nn.standardize(c)).all()


# --- linear -------------------------------------------------------------------

def test_embed_clamps_out_of_range_ids_and_wraps_negative_ones():
  table = jnp.arange(5, dtype=jnp.float32)[:, None] * jnp.ones((1, 3))
  ids = jnp.array([0, 4, 5, 100, -1, -5, -6, -100])
  y = nn.Embed.call({'embedding': table}, ids, num_embeddings=5, features=3)
  np.testing.assert_array_equal(y[:, 0], [0, 4, 4, 4, 4, 0, 0, 0])
  # linen's Embed yields NaN rows for the same ids.
  y_linen = linen.Embed(5, 3).apply({'params': {'embedding': table}}, ids)
  assert np.isnan(y_linen[2:4]).all()


@pytest.mark.parametrize('dtype', [jnp.int8, jnp.uint8, jnp.int16,
                                   jnp.int32, jnp.uint32])
def test_embed_accepts_any_integer_dtype(dtype):
  y, params = nn.Embed.init(K0, jnp.array([1, 2], dtype), num_embeddings=4,
                            features=2)
  np.testing.assert_array_equal(y, params['embedding'][1:3])


def test_embed_attend_on_a_shared_embed_gets_partial_kwargs():

  class Tied(nn.Module):

    def apply(self, ids):
      embed = nn.Embed.shared(num_embeddings=6, features=4, name='emb')
      return embed.attend(embed(ids))

  y, params = Tied.init(K0, jnp.array([[1, 5]]))
  table = params['emb']['embedding']
  np.testing.assert_allclose(y, table[jnp.array([[1, 5]])] @ table.T,
                             rtol=1e-6)


def test_dense_general_initialises_every_batch_slice_with_the_same_key():
  _, params = nn.DenseGeneral.init(K0, _x(3, 4, 5), features=(2, 2),
                                   batch_dims=(0,))
  kernel = params['kernel']
  assert kernel.shape == (3, 5, 2, 2)
  flat = nn.initializers.lecun_normal()(
      nn.base._fold_in_str(K0, 'kernel'), (5, 4))  # pylint: disable=protected-access
  for b in range(3):
    np.testing.assert_array_equal(kernel[b].reshape(5, 4), flat)


def test_dense_general_out_of_order_axes_keep_the_legacy_kernel_layout():
  x = _x(2, 3, 4, 5)
  y, params = nn.DenseGeneral.init(K0, x, features=6, axis=(3, 1))
  assert params['kernel'].shape == (5, 3, 6)
  expected = np.einsum('bjci,ijf->bcf', x, params['kernel']) + params['bias']
  np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_conv_same_padding_with_input_dilation_pads_like_legacy_jax():
  x = _x(1, 5, 5, 2)
  y, params = nn.Conv.init(K0, x, features=3, kernel_size=(3, 3),
                           input_dilation=(2, 2))
  # Legacy JAX: 'SAME' pads computed from the undilated 5x5 input.
  expected = lax.conv_general_dilated(
      x, params['kernel'], (1, 1), [(1, 1), (1, 1)], lhs_dilation=(2, 2),
      dimension_numbers=('NHWC', 'HWIO', 'NHWC')) + params['bias']
  assert y.shape == (1, 9, 9, 3)
  np.testing.assert_allclose(y, expected, rtol=1e-6)


def test_conv_accepts_nested_list_inputs():
  y, _ = nn.Conv.init(K0, [[[1.], [2.], [3.]]], features=2, kernel_size=(2,),
                      kernel_init=_ones_init)
  np.testing.assert_array_equal(y, [[[3., 3.], [5., 5.], [3., 3.]]])


# --- normalization ------------------------------------------------------------

CONSTANT = jnp.full((7, 2), 777.77, jnp.float32)


@pytest.mark.parametrize('layer,kwargs,x', [
    (nn.BatchNorm, {}, CONSTANT),
    (nn.LayerNorm, {}, CONSTANT.T),
    (nn.GroupNorm, {'num_groups': 1}, CONSTANT.T[:, None, :]),
], ids=['batch_norm', 'layer_norm', 'group_norm'])
def test_normalizations_do_not_clip_the_variance(layer, kwargs, x):
  """Legacy gives NaN where E[x^2] - E[x]^2 rounds negative (linen clips).

  777.77 repeated 7 times: the float32 moments give a variance of -0.0625,
  larger in magnitude than epsilon, so rsqrt yields NaN.
  """
  y, _ = layer.init(K0, x, **kwargs)
  assert np.isnan(y).all()
  linen_layer = {nn.BatchNorm: linen.BatchNorm(use_running_average=False),
                 nn.LayerNorm: linen.LayerNorm(),
                 nn.GroupNorm: linen.GroupNorm(1)}[layer]
  y_linen, _ = linen_layer.init_with_output(K0, x)
  assert np.isfinite(y_linen).all()


def test_group_norm_params_have_the_input_rank():
  x = _x(2, 4, 4, 8)
  y, params = nn.GroupNorm.init(K0, x, num_groups=4,
                                scale_init=nn.initializers.normal(1.),
                                bias_init=nn.initializers.normal(1.))
  assert params['scale'].shape == params['bias'].shape == (1, 1, 1, 8)
  flat = jax.tree_util.tree_map(lambda a: a.reshape(-1), params)
  np.testing.assert_allclose(
      y, linen.GroupNorm(4).apply({'params': flat}, x), rtol=1e-5, atol=1e-5)


def test_layer_norm_rounds_scale_and_bias_to_dtype():
  x = _x(2, 6)
  params = {'scale': jnp.full((6,), 1.001), 'bias': jnp.full((6,), 0.1001)}
  y = nn.LayerNorm.call(params, x, dtype=jnp.bfloat16)
  mean = x.mean(-1, keepdims=True)
  var = (x * x).mean(-1, keepdims=True) - mean * mean
  scale = np.float32(jnp.bfloat16(1.001))
  bias = np.float32(jnp.bfloat16(0.1001))
  expected = (x - mean) / np.sqrt(var + 1e-6) * scale + bias
  assert y.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.float32(y), jnp.bfloat16(expected), rtol=1e-2)


def test_batch_norm_over_a_non_last_axis():
  x = _x(4, 3, 5)
  with nn.stateful() as state:
    y, params = nn.BatchNorm.init(K0, x, axis=1,
                                  scale_init=nn.initializers.normal(1.))
  assert params['scale'].shape == (3,)
  assert state['/']['mean'].shape == (3,)
  mean = x.mean((0, 2), keepdims=True)
  var = (x * x).mean((0, 2), keepdims=True) - mean * mean
  expected = ((x - mean) / np.sqrt(var + 1e-5) *
              params['scale'].reshape(1, 3, 1))
  np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_batch_norm_statistics_exist_only_when_stateful():
  x = _x(4, 3)
  y, params = nn.BatchNorm.init(K0, x)  # no stateful: no statistics
  assert set(params) == {'scale', 'bias'}
  with nn.stateful() as state:
    nn.BatchNorm.init(K0, x)
  # Not updated during init.
  np.testing.assert_array_equal(state['/']['mean'], np.zeros(3))
  np.testing.assert_array_equal(state['/']['var'], np.ones(3))
  with nn.stateful(state) as state2:
    nn.BatchNorm.call(params, x, momentum=0.5)
  np.testing.assert_allclose(state2['/']['mean'], 0.5 * x.mean(0), rtol=1e-6)
  # Evaluation with the running averages.
  with nn.stateful(state2, mutable=False):
    y = nn.BatchNorm.call(params, x, use_running_average=True)
  expected = ((x - state2['/']['mean']) /
              np.sqrt(state2['/']['var'] + 1e-5))
  np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


def test_batch_norm_cross_device_statistics_equal_the_global_batch():
  """axis_name: pmean of [mean, E[x^2]] over 8 devices (subprocess)."""
  code = textwrap.dedent("""
      import jax, jax.numpy as jnp, numpy as np
      from flax import nn
      x = np.random.RandomState(0).normal(size=(8, 4, 3)).astype(np.float32)
      with nn.stateful() as state:
        _, params = nn.BatchNorm.init(jax.random.PRNGKey(0), x[0])
      def step(x, state):
        with nn.stateful(state) as new_state:
          y = nn.BatchNorm.call(params, x, axis_name='batch', momentum=0.)
        return y, new_state
      rep = jax.tree_util.tree_map(lambda a: np.stack([a] * 8), state)
      y, new_state = jax.pmap(step, axis_name='batch')(x, rep)
      flat = x.reshape(32, 3)
      with nn.stateful(state) as ref_state:
        y_ref = nn.BatchNorm.call(params, flat, momentum=0.)
      np.testing.assert_allclose(np.asarray(y).reshape(32, 3), y_ref,
                                 rtol=1e-5, atol=1e-5)
      for d in range(8):
        np.testing.assert_allclose(new_state['/']['var'][d],
                                   ref_state['/']['var'], rtol=1e-5)
      print('OK', jax.device_count())
      """)
  env = dict(os.environ, JAX_PLATFORMS='cpu',
             XLA_FLAGS='--xla_force_host_platform_device_count=8')
  run = subprocess.run([sys.executable, '-c', code], env=env,
                       capture_output=True, text=True, timeout=300)
  assert run.returncode == 0, run.stderr[-3000:]
  assert run.stdout.strip().endswith('OK 8')


# --- pooling ------------------------------------------------------------------

def test_pool_defaults_are_stride_one_and_valid():
  x = _x(1, 4, 4, 1)
  assert nn.max_pool(x, (2, 2)).shape == (1, 3, 3, 1)


def test_pool_accepts_v02_full_rank_padding():
  x = _x(2, 5, 5, 3)
  spatial = ((1, 1), (0, 1))
  full = ((0, 0),) + spatial + ((0, 0),)
  np.testing.assert_array_equal(nn.avg_pool(x, (3, 2), padding=full),
                                nn.avg_pool(x, (3, 2), padding=spatial))


def test_pool_refuses_padding_of_batch_or_features():
  with pytest.raises(ValueError, match=r'pads the batch or feature axis'):
    nn.max_pool(_x(2, 5, 5, 3), (2, 2), padding=((1, 0), (0, 0), (0, 0),
                                                 (0, 0)))


def test_custom_reduce_pool():
  x = jnp.full((1, 3, 3, 1), 2.)
  y = nn.pooling.pool(x, 1., lax.mul, (2, 2), (1, 1), 'VALID')
  np.testing.assert_array_equal(y, jnp.full((1, 2, 2, 1), 16.))


# --- attention ----------------------------------------------------------------

def test_multi_axis_attention_is_attention_over_the_flattened_axes():
  q, k, v = _x(2, 3, 4, 2, 5), _x(2, 3, 4, 2, 5, seed=1), _x(2, 3, 4, 2, 6,
                                                             seed=2)
  y = nn.dot_product_attention(q, k, v)  # default axes (1, 2)
  flat = linen.dot_product_attention(q.reshape(2, 12, 2, 5),
                                     k.reshape(2, 12, 2, 5),
                                     v.reshape(2, 12, 2, 6))
  np.testing.assert_allclose(y, flat.reshape(2, 3, 4, 2, 6), rtol=1e-5,
                             atol=1e-6)


def test_attention_over_a_middle_axis_treats_the_others_as_batch():
  q, k, v = _x(2, 3, 4, 2, 5), _x(2, 3, 4, 2, 5, seed=1), _x(2, 3, 4, 2, 5,
                                                             seed=2)
  y = nn.dot_product_attention(q, k, v, axis=(1,))
  # Move the width axis out of the way: linen attends over axis -3.
  t = lambda a: a.transpose(0, 2, 1, 3, 4)
  expected = t(linen.dot_product_attention(t(q), t(k), t(v)))
  np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


def test_self_attention_attends_jointly_over_all_middle_axes_by_default():
  x = _x(2, 3, 4, 8)
  y, params = nn.SelfAttention.init(K0, x, num_heads=2)
  assert set(params) == {'query', 'key', 'value', 'out'}
  flat = linen.MultiHeadDotProductAttention(2).apply(
      {'params': params}, x.reshape(2, 12, 8))
  np.testing.assert_allclose(y, flat.reshape(2, 3, 4, 8), rtol=1e-5,
                             atol=1e-5)


def test_padding_mask_one_axis():
  q = jnp.array([[1, 1, 0]])
  k = jnp.array([[1, 0]])
  m = nn.attention.make_padding_mask(q[..., None], k[..., None], (1, 3, 2, 4),
                                     (1, 2, 2, 4))
  assert m.dtype == jnp.float32 and m.shape == (1, 1, 3, 2)
  np.testing.assert_array_equal(m[0, 0], np.outer(q[0], k[0]))


def test_padding_mask_two_axes_keeps_the_reversed_key_axis_quirk():
  rs = np.random.RandomState(0)
  q = rs.randint(0, 2, (1, 2, 3, 1))
  k = rs.randint(0, 2, (1, 2, 3, 1))
  m = nn.attention.make_padding_mask(q, k, (1, 2, 3, 1, 4), (1, 2, 3, 1, 4),
                                     attention_axis=(1, 2))
  assert m.shape == (1, 1, 2, 3, 2, 3)
  flat = np.asarray(m).reshape(2, 3, 6)
  for i1 in range(2):
    for i2 in range(3):
      for kx in range(3):
        for ky in range(2):
          # Key positions enumerate (width, height): reversed axis order.
          assert flat[i1, i2, kx * 2 + ky] == q[0, i1, i2, 0] * k[0, ky, kx, 0]


def test_segmentation_mask_compares_ids():
  seg = jnp.array([[1, 1, 2]])[..., None]
  m = nn.attention.make_padding_mask(seg, seg, (1, 3, 1, 2), (1, 3, 1, 2),
                                     segmentation_mask=True)
  np.testing.assert_array_equal(m[0, 0], [[1, 1, 0], [1, 1, 0], [0, 0, 1]])


@pytest.mark.parametrize('self_mask,k', [(False, 0), (True, -1)])
def test_causal_mask(self_mask, k):
  m = nn.attention._make_causal_mask(jnp.ones((2, 4, 1, 3)),  # pylint: disable=protected-access
                                     self_mask=self_mask)
  assert m.dtype == jnp.bool_ and m.shape == (1, 1, 4, 4)
  np.testing.assert_array_equal(m[0, 0], np.tril(np.ones((4, 4)), k) > 0)


def test_masks_become_a_minus_1e10_bias():
  """A masked-out key gets exactly zero weight; unmasked rows unchanged."""
  x = _x(1, 4, 8)
  pad = jnp.array([[1, 1, 1, 0]])[..., None]
  y, params = nn.SelfAttention.init(K0, x, num_heads=2, padding_mask=pad)
  x2 = x.at[0, 3].set(100.)  # changing the padded token changes nothing
  y2 = nn.SelfAttention.call(params, x2, num_heads=2, padding_mask=pad)
  np.testing.assert_allclose(y[0, :3], y2[0, :3], rtol=1e-5, atol=1e-6)


def _decode(module, params, x, cache_def):
  cache = cache_def.initialize_cache(x.shape[:2])
  outs = []
  step = jax.jit(lambda p, c, xt: _step(module, p, c, xt))
  for t in range(x.shape[1]):
    y, cache = step(params, cache, x[:, t:t + 1])
    outs.append(y)
  return jnp.concatenate(outs, axis=1), cache


def _step(module, params, cache, xt):
  with cache.mutate() as new_cache:
    y = module.call(params, xt, cache=new_cache)
  return y, new_cache


def test_cache_decoding_under_jit_reproduces_the_causal_pass():
  module = nn.SelfAttention.partial(num_heads=2, causal_mask=True)
  x = _x(2, 5, 8)
  with nn.attention.Cache().mutate() as cache_def:
    _, params = module.init_by_shape(K0, [((2, 5, 8), jnp.float32)],
                                     cache=cache_def)
  np.testing.assert_array_equal(cache_def['/'], [4, 2, 4])
  y, cache = _decode(module, params, x, cache_def)
  np.testing.assert_allclose(y, module.call(params, x), rtol=1e-5, atol=1e-5)
  assert isinstance(cache, nn.attention.Cache)
  assert int(cache['/'].i) == 5


def test_cache_is_a_pytree_that_stays_a_cache():
  cache = nn.attention.Cache({'/': np.array([4, 2, 3], np.int32)})
  cache = cache.initialize_cache((1, 6))
  leaves, treedef = jax.tree_util.tree_flatten(cache)
  assert [leaf.shape for leaf in leaves] == [(1, 6, 2, 3), (1, 6, 2, 3), ()]
  assert isinstance(jax.tree_util.tree_unflatten(treedef, leaves),
                    nn.attention.Cache)


def test_scan_in_dim_alias_warns():
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    _, ys = nn.attention.scan_in_dim(lambda c, x: (c, x * 2), 0,
                                     jnp.ones((2, 3)), axis=(1,))
  assert any(w.category is DeprecationWarning and
             'scan_in_dim moved to flax.jax_utils' in str(w.message)
             for w in caught)
  np.testing.assert_array_equal(ys, jnp.full((2, 3), 2.))


# --- recurrent ----------------------------------------------------------------

@pytest.mark.parametrize('cell', [nn.LSTMCell, nn.OptimizedLSTMCell])
def test_lstm_carry_uses_split_keys_in_c_h_order(cell):
  init = nn.initializers.normal(1.)
  c, h = cell.initialize_carry(K0, (2,), 3, init_fn=init)
  k1, k2 = random.split(K0)
  np.testing.assert_array_equal(c, init(k1, (2, 3)))
  np.testing.assert_array_equal(h, init(k2, (2, 3)))


def test_gru_and_conv_lstm_carries():
  init = nn.initializers.normal(1.)
  np.testing.assert_array_equal(
      nn.GRUCell.initialize_carry(K0, (2,), 3, init_fn=init),
      init(K0, (2, 3)))
  c, h = nn.ConvLSTM.initialize_carry(K0, (2,), (4, 4, 6))
  assert c.shape == h.shape == (2, 4, 4, 6)


def test_lstm_children_are_legacy_dense_modules():
  """capture_module_outputs sees the Dense outputs at the legacy paths."""
  carry, x = (jnp.zeros((2, 4)), jnp.zeros((2, 4))), _x(2, 3)
  _, params = nn.LSTMCell.init(K0, carry, x)
  with nn.capture_module_outputs() as outputs:
    nn.LSTMCell.call(params, carry, x)
  np.testing.assert_allclose(outputs['/ii'][0], x @ params['ii']['kernel'],
                             rtol=1e-6)
  assert sorted(k for k in outputs.as_dict() if k != '/') == [
      '/hf', '/hg', '/hi', '/ho', '/if', '/ig', '/ii', '/io']


def test_optimized_lstm_matches_lstm():
  carry, x = (_x(2, 4, seed=1), _x(2, 4, seed=2)), _x(2, 3)
  y1, p1 = nn.LSTMCell.init(K0, carry, x)
  y2, p2 = nn.OptimizedLSTMCell.partial(name='LSTMCell').init(K0, carry, x)
  jax.tree_util.tree_map(np.testing.assert_array_equal, p1, p2)
  jax.tree_util.tree_map(
      lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), y1, y2)


# --- dtype policy (spec 2.16) -------------------------------------------------

BF16 = jnp.bfloat16
F32 = jnp.float32


@pytest.mark.parametrize('layer,kwargs,x,out_dtype', [
    (nn.Dense, {'features': 3}, jnp.ones((2, 4), BF16), F32),
    (nn.Dense, {'features': 3, 'dtype': BF16}, jnp.ones((2, 4)), BF16),
    (nn.Dense, {'features': 3}, jnp.ones((2, 4), jnp.int32), F32),
    (nn.DenseGeneral, {'features': (2, 2)}, jnp.ones((2, 4), BF16), F32),
    (nn.Conv, {'features': 2, 'kernel_size': (3,)}, jnp.ones((1, 5, 2), BF16),
     F32),
    (nn.Conv, {'features': 2, 'kernel_size': (3,), 'dtype': BF16},
     jnp.ones((1, 5, 2)), BF16),
    (nn.ConvTranspose, {'features': 2, 'kernel_size': (3,)},
     jnp.ones((1, 5, 2), BF16), F32),
    (nn.Embed, {'num_embeddings': 4, 'features': 2},
     jnp.ones((2,), jnp.int32), F32),
    (nn.LayerNorm, {}, jnp.ones((2, 4), BF16), F32),
    (nn.LayerNorm, {'dtype': BF16}, jnp.ones((2, 4)), BF16),
    (nn.GroupNorm, {'num_groups': 2}, jnp.ones((2, 3, 4), BF16), F32),
    (nn.BatchNorm, {}, jnp.ones((2, 4), BF16), F32),
    (nn.BatchNorm, {'dtype': BF16}, jnp.ones((2, 4)), BF16),
    (nn.SelfAttention, {'num_heads': 2}, jnp.ones((1, 3, 4), BF16), F32),
    (nn.SelfAttention, {'num_heads': 2, 'dtype': BF16}, jnp.ones((1, 3, 4)),
     BF16),
])
def test_layers_compute_in_dtype(layer, kwargs, x, out_dtype):
  y, params = layer.init(K0, x, **kwargs)
  assert y.dtype == out_dtype
  assert all(p.dtype == F32 for p in jax.tree_util.tree_leaves(params))


@pytest.mark.parametrize('fn', [nn.avg_pool, nn.max_pool])
def test_pooling_preserves_dtype(fn):
  assert fn(jnp.ones((1, 4, 4, 1), BF16), (2, 2)).dtype == BF16


def test_float64_inputs_are_down_cast_and_params_float32_under_x64():
  code = textwrap.dedent("""
      import jax
      jax.config.update('jax_enable_x64', True)
      import jax.numpy as jnp
      from flax import nn
      x = jnp.ones((2, 3), jnp.float64)
      y, p = nn.Dense.init(jax.random.PRNGKey(0), x, features=2)
      z, q = nn.LayerNorm.init(jax.random.PRNGKey(0), x)
      dtypes = {str(a.dtype) for a in jax.tree_util.tree_leaves((p, q))}
      print(y.dtype, z.dtype, *dtypes)
      """)
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  run = subprocess.run([sys.executable, '-c', code], env=env,
                       capture_output=True, text=True, timeout=300)
  assert run.returncode == 0, run.stderr[-3000:]
  assert run.stdout.split()[-3:] == ['float32', 'float32', 'float32']


# --- errors: legacy type and message, plus the module path --------------------

class _Named(nn.Module):
  """Runs ``layer`` as child 'inner' (errors must name '/outer/inner')."""

  def apply(self, x, layer, **kwargs):
    return _Inner(x, layer=layer, name='outer', **kwargs)


class _Inner(nn.Module):

  def apply(self, x, layer, **kwargs):
    return layer(x, name='inner', **kwargs)


ERROR_CASES = [
    ('dense_general_batch_dims', nn.DenseGeneral, jnp.ones((2, 3, 4)),
     {'features': 2, 'batch_dims': (0, 2)}, ValueError,
     r'batch_dims \(0, 2\) must be consecutive leading dimensions starting '
     r'from 0\. \(in module /outer/inner\)'),
    ('conv_groups', nn.Conv, jnp.ones((1, 5, 3)),
     {'features': 2, 'kernel_size': (3,), 'feature_group_count': 2},
     AssertionError, r'in_features \(3\) must be divisible by '
     r'feature_group_count \(2\) \(in module /outer/inner\)'),
    ('embed_float_ids', nn.Embed, jnp.ones((2,)),
     {'num_embeddings': 3, 'features': 2}, ValueError,
     r'Input type must be an integer or unsigned integer\. '
     r'\(in module /outer/inner\)'),
    ('group_norm_neither', nn.GroupNorm, jnp.ones((2, 4)),
     {'num_groups': None}, ValueError,
     r'Either `num_groups` or `group_size` should be specified, but not both '
     r'of them\. \(in module /outer/inner\)'),
    ('group_norm_both', nn.GroupNorm, jnp.ones((2, 4)),
     {'num_groups': 2, 'group_size': 2}, ValueError,
     r'Either `num_groups` or `group_size` should be specified'),
    ('group_norm_group_size', nn.GroupNorm, jnp.ones((2, 6)),
     {'num_groups': None, 'group_size': 4}, ValueError,
     r'Number of channels \(6\) is not multiple of the group size \(4\)\. '
     r'\(in module /outer/inner\)'),
    ('group_norm_num_groups', nn.GroupNorm, jnp.ones((2, 6)),
     {'num_groups': 4}, ValueError,
     r'Number of channels \(6\) is not multiple of the number of groups '
     r'\(4\)\. \(in module /outer/inner\)'),
    ('batch_norm_no_stats', nn.BatchNorm, jnp.ones((2, 4)),
     {'use_running_average': True}, ValueError,
     r'when use_running_averages is True either use a stateful context or '
     r'provide batch_stats \(in module /outer/inner\)'),
    ('attention_heads', nn.SelfAttention, jnp.ones((1, 3, 6)),
     {'num_heads': 4}, AssertionError,
     r'Memory dimension must be divisible by number of heads\.'),
    ('attention_axis', nn.SelfAttention, jnp.ones((1, 3, 4)),
     {'num_heads': 2, 'attention_axis': (2,)}, ValueError,
     r'Attention axis must be between the batch axis and the last-two axes\.'),
    ('cache_without_causal', nn.SelfAttention, jnp.ones((1, 3, 4)),
     {'num_heads': 2, 'cache': nn.attention.Cache()}, AssertionError,
     r'Caching is only support for causal attention\.'),
]


@pytest.mark.parametrize('layer,x,kwargs,exc,message',
                         [c[1:] for c in ERROR_CASES],
                         ids=[c[0] for c in ERROR_CASES])
def test_layer_errors(layer, x, kwargs, exc, message):
  with pytest.raises(exc, match=message):
    _Named.init(K0, x, layer=layer, **kwargs)


def test_dense_applied_to_a_different_input_size():
  _, params = nn.Dense.init(K0, jnp.ones((1, 3)), features=4)
  with pytest.raises(ValueError, match=r'Existing shape \(3, 4\) differs from '
                     r"requested shape \(5, 4\) \(parameter 'kernel' in "
                     r'module /\)'):
    nn.Dense.call(params, jnp.ones((1, 5)), features=4)


class _TwoLayers(nn.Module):

  def apply(self, x):
    return nn.Dense(nn.Dense(x, 4, name='encoder'), 2)


def test_shape_error_names_the_nested_layer_path():
  _, params = _TwoLayers.init(K0, jnp.ones((1, 3)))
  with pytest.raises(ValueError, match=r"Existing shape \(3, 4\) differs from "
                     r"requested shape \(6, 4\) \(parameter 'kernel' in "
                     r'module /encoder\)'):
    _TwoLayers.call(params, jnp.ones((1, 6)))


def _decode_errors_setup():
  module = nn.SelfAttention.partial(num_heads=2, causal_mask=True)
  with nn.attention.Cache().mutate() as cache_def:
    _, params = module.init_by_shape(K0, [((1, 4, 4), jnp.float32)],
                                     cache=cache_def)
  return module, params, cache_def


def test_decoding_with_an_uninitialized_cache():
  module, params, cache_def = _decode_errors_setup()
  with cache_def.mutate() as cache:
    with pytest.raises(ValueError, match=r'^Cache is not initialized\. '
                       r'\(in module /\)$'):
      module.call(params, jnp.ones((1, 1, 4)), cache=cache)


def test_decoding_a_step_of_the_wrong_shape():
  module, params, cache_def = _decode_errors_setup()
  with cache_def.initialize_cache((1, 4)).mutate() as cache:
    with pytest.raises(ValueError, match=r'^Invalid shape provided, expected '
                       r'shape \(1, 1, 4\) instead got \(1, 2, 4\)\.'):
      module.call(params, jnp.ones((1, 2, 4)), cache=cache)


def test_initialize_cache_with_the_wrong_rank():
  _, _, cache_def = _decode_errors_setup()
  with pytest.raises(ValueError, match=r'^Shape should be a tuple with the '
                     r'shape of the batchand attention dims\.$'):
    cache_def.initialize_cache((1, 4, 4))
