"""Early-linen (flax 0.3.x) models, written as 2021 code wrote them.

The same file runs under flax 0.3.6 (``record_flax036.py``, on the oracle)
and under the compatibility layer (``tests/test_early_linen.py``): cells
without ``features``, ``initialize_carry`` as the static method, a two-argument
initializer, a ``param`` override without ``param_dtype``, attention with a
positional mask.  ``record()`` initialises each model from ``PRNGKey(0)``
and applies it, and returns every variable and output by name.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn


def _inputs(*shape):
  size = int(np.prod(shape))
  return jnp.sin(jnp.arange(size, dtype=jnp.float32)).reshape(shape)


def two_arg_init(rng, shape):
  return jax.random.uniform(rng, shape, minval=-0.5, maxval=0.5)


class MLP(nn.Module):

  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Dense(4)(x))
    return nn.Dense(2, kernel_init=two_arg_init)(x)


class SetupNet(nn.Module):

  def setup(self):
    self.encoder = nn.Dense(3)
    self.layers = [nn.Dense(2), nn.Dense(2)]
    self.w = self.param('w', nn.initializers.normal(1.0), (2,))

  def __call__(self, x):
    x = self.encoder(x)
    for layer in self.layers:
      x = layer(x)
    return x * self.w


class Shared(nn.Module):

  @nn.compact
  def __call__(self, x):
    dense = nn.Dense(3)
    return dense(x) + dense(x) + self.param('b', nn.initializers.uniform(),
                                            (3,))


class Block(nn.Module):
  features: int

  @nn.compact
  def __call__(self, x):
    return nn.LayerNorm()(nn.Dense(self.features)(x))


class Nested(nn.Module):

  @nn.compact
  def __call__(self, x):
    x = Block(3, name='first')(x)
    return Block(2)(x)


class Noisy(nn.Module):

  @nn.compact
  def __call__(self, x):
    x = nn.Dense(3)(x)
    x = nn.Dropout(0.5)(x, deterministic=False)
    return x + jax.random.normal(self.make_rng('noise'), x.shape)


class StdConv(nn.Conv):
  """Weight standardisation (BiT style): ``param`` overridden, flax 0.3."""

  def param(self, name, init_fn, shape):
    p = super().param(name, init_fn, shape)
    if name == 'kernel':
      p = p - jnp.mean(p, axis=(0, 1, 2))
      p = p / (jnp.std(p, axis=(0, 1, 2)) + 1e-5)
    return p


class ConvNet(nn.Module):

  @nn.compact
  def __call__(self, x):
    x = StdConv(3, (2, 2))(x)
    x = nn.BatchNorm(use_running_average=False)(x)
    return nn.Dense(2)(x.mean((1, 2)))


class ScanLSTM(nn.Module):

  @functools.partial(nn.transforms.scan, variable_broadcast='params',
                     in_axes=1, out_axes=1, split_rngs={'params': False})
  @nn.compact
  def __call__(self, carry, x):
    return nn.LSTMCell()(carry, x)


class Cells(nn.Module):

  @nn.compact
  def __call__(self, x):
    batch = x.shape[:1]
    rng = jax.random.PRNGKey(1)
    gru = nn.GRUCell.initialize_carry(rng, batch, 3)
    gru, y1 = nn.GRUCell()(gru, x)
    lstm = nn.OptimizedLSTMCell.initialize_carry(rng, batch, 3)
    lstm, y2 = nn.OptimizedLSTMCell()(lstm, x)
    return y1 + y2


class ConvCell(nn.Module):

  @nn.compact
  def __call__(self, x):
    carry = nn.ConvLSTM.initialize_carry(jax.random.PRNGKey(1), x.shape[:1],
                                         x.shape[1:3] + (2,))
    _, y = nn.ConvLSTM(2, (2, 2))(carry, x)
    return y


class ScanBlock(nn.Module):

  @nn.compact
  def __call__(self, carry, x):
    return nn.tanh(nn.Dense(carry.shape[-1])(carry) + x), carry.sum()


class ScanClasses(nn.Module):
  """``nn.scan`` of classes: a featureless cell, and layers (split keys)."""

  @nn.compact
  def __call__(self, carry, xs):
    lstm = nn.scan(nn.LSTMCell, variable_broadcast='params',
                   split_rngs={'params': False}, in_axes=1, out_axes=1)
    carry, ys = lstm(name='lstm')(carry, xs)
    layers = nn.scan(ScanBlock, variable_axes={'params': 0},
                     split_rngs={'params': True}, length=3)
    h, sums = layers(name='layers')(carry[1], jnp.zeros((3, 1)))
    return ys, h, sums


class VmapDense(nn.Module):

  @nn.compact
  def __call__(self, x):
    dense = nn.vmap(nn.Dense, variable_axes={'params': 0},
                    split_rngs={'params': True}, in_axes=0)
    return dense(2)(x)


class Attention(nn.Module):

  @nn.compact
  def __call__(self, q, kv):
    mask = nn.make_attention_mask(jnp.ones(q.shape[:2]),
                                  jnp.arange(kv.shape[1]) < 3)
    y = nn.MultiHeadDotProductAttention(num_heads=2)(q, kv, mask)
    return y + nn.SelfAttention(num_heads=2)(q)


class Embedder(nn.Module):

  @nn.compact
  def __call__(self, ids):
    embed = nn.Embed(7, 4)
    return embed.attend(embed(ids))


def _lstm_inputs():
  carry = nn.LSTMCell.initialize_carry(jax.random.PRNGKey(1), (2,), 3)
  return carry, _inputs(2, 4, 2)


# name -> (module, inputs, extra rng streams {name: seed})
MODELS = {
    'mlp': (MLP, lambda: (_inputs(2, 3),), {}),
    'setup': (SetupNet, lambda: (_inputs(2, 3),), {}),
    'shared': (Shared, lambda: (_inputs(2, 3),), {}),
    'nested': (Nested, lambda: (_inputs(2, 3),), {}),
    'noisy': (Noisy, lambda: (_inputs(2, 3),), {'dropout': 1, 'noise': 2}),
    'convnet': (ConvNet, lambda: (_inputs(1, 4, 4, 2),), {}),
    'scan_lstm': (ScanLSTM, _lstm_inputs, {}),
    'cells': (Cells, lambda: (_inputs(2, 2),), {}),
    'conv_cell': (ConvCell, lambda: (_inputs(1, 3, 3, 2),), {}),
    'vmap': (VmapDense, lambda: (_inputs(3, 2, 2),), {}),
    'scan_classes': (ScanClasses, _lstm_inputs, {}),
    'attention': (Attention, lambda: (_inputs(2, 4, 4), _inputs(2, 5, 4)),
                  {}),
    'embed': (Embedder, lambda: (jnp.array([[1, 2], [3, 6]]),), {}),
}


def _leaves(tree, prefix, out):
  for key in sorted(tree):
    value = tree[key]
    if hasattr(value, 'keys'):
      _leaves(value, prefix + (key,), out)
    else:
      out['/'.join(prefix + (key,))] = np.asarray(value)


def record(names=None):
  """{'<model>:<collection>/<path>' or '<model>:out<i>': array}."""
  out = {}
  for name, (module, inputs, streams) in MODELS.items():
    if names is not None and name not in names:
      continue
    rngs = {'params': jax.random.PRNGKey(0)}
    rngs.update({k: jax.random.PRNGKey(v) for k, v in streams.items()})
    variables = module().init(rngs, *inputs())
    mutable = [c for c in variables if c != 'params']
    y = module().apply(variables, *inputs(), mutable=mutable or False,
                       rngs={k: jax.random.PRNGKey(v + 10)
                             for k, v in streams.items()})
    if mutable:
      y = y[0]
    found = {}
    _leaves(variables, (), found)
    for i, leaf in enumerate(jax.tree_util.tree_leaves(y)):
      found[f'out{i}'] = np.asarray(leaf)
    out.update({f'{name}:{k}': v for k, v in found.items()})
  return out
