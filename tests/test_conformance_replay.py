"""Why two mnist_cnn arrays get rtol 1e-3: today's JAX drifts, not flaxlegacy.

After 20 Momentum steps the Conv_0 kernel momentum of the reference
(recorded on jax 0.4.13) differs from any run on jax 0.10.2 by about 4e-4 of
its scale.  This test replays the reference program in plain JAX (lax
convolutions, reduce_window pooling, the legacy Momentum rule; no Flax at
all) from the reference's initial parameters and data, and requires
flaxlegacy's run to match that replay at rtol 1e-5, every leaf, so the
looser row in test_conformance.py cannot hide a real difference.
"""

import os

import numpy as np

from tests import conformance


def _plain_jax_replay(ref, steps, lr=0.1, beta=0.9):
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from jax import lax  # pylint: disable=g-import-not-at-top

  params = {}
  for k in ref.files:
    if k.startswith('init/params/'):
      _, _, module, name = k.split('/')
      params.setdefault(module, {})[name] = jnp.asarray(ref[k])

  def conv(x, p):
    y = lax.conv_general_dilated(x, p['kernel'], (1, 1), 'SAME',
                                 dimension_numbers=('NHWC', 'HWIO', 'NHWC'))
    return y + p['bias']

  def dense(x, p):
    return lax.dot_general(x, p['kernel'],
                           (((x.ndim - 1,), (0,)), ((), ()))) + p['bias']

  def pool(x):
    return lax.reduce_window(x, 0., lax.add, (1, 2, 2, 1), (1, 2, 2, 1),
                             'VALID') / 4.

  def model(p, x):
    x = pool(jax.nn.relu(conv(x, p['Conv_0'])))
    x = pool(jax.nn.relu(conv(x, p['Conv_1'])))
    x = x.reshape((x.shape[0], -1))
    x = jax.nn.relu(dense(x, p['Dense_2']))
    return jax.nn.log_softmax(dense(x, p['Dense_3']))

  def loss(p, x, y):
    one_hot = (y[..., None] == jnp.arange(10)).astype(jnp.float32)
    return -jnp.mean(jnp.sum(one_hot * model(p, x), axis=-1))

  @jax.jit
  def step(p, m, x, y):
    g = jax.grad(loss)(p, x, y)
    m = jax.tree_util.tree_map(lambda m, g: beta * m + g, m, g)
    p = jax.tree_util.tree_map(lambda p, m: p - lr * m, p, m)
    return p, m

  momentum = jax.tree_util.tree_map(jnp.zeros_like, params)
  for s in range(steps):
    params, momentum = step(params, momentum, ref['data/images'][s],
                            ref['data/labels'][s])
  return params, momentum


def _scaled_err(a, b):
  a = np.asarray(a, np.float64)
  b = np.asarray(b, np.float64)
  return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def test_mnist_drift_is_jax_not_flaxlegacy(generated):
  cand = np.load(os.path.join(generated('mnist_cnn'), 'mnist_cnn.npz'))
  ref = np.load(os.path.join(conformance.reference_dir(), 'mnist_cnn.npz'))
  params, momentum = _plain_jax_replay(ref, steps=20)
  prefix = 'final/optimizer/'
  worst_vs_ref = 0.
  for module in ('Conv_0', 'Conv_1', 'Dense_2', 'Dense_3'):
    for name in ('kernel', 'bias'):
      for key, replayed in (
          (f'{prefix}target/params/{module}/{name}', params[module][name]),
          (f'{prefix}state/param_states/params/{module}/{name}/momentum',
           momentum[module][name])):
        # flaxlegacy computes what a correct modern replay computes ...
        err = _scaled_err(cand[key], replayed)
        assert err < 1e-5, f'{key}: flaxlegacy vs plain-JAX replay {err:.3g}'
        worst_vs_ref = max(worst_vs_ref, _scaled_err(replayed, ref[key]))
  # ... and that replay itself is as far from the jax 0.4.13 reference as the
  # looser conformance row allows (the drift is real, and bounded).
  assert 1e-4 < worst_vs_ref < 1e-3, worst_vs_ref
