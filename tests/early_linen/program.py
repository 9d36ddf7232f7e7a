"""A flax 0.3-era training loop over models.py (for the upgrade's numeric test).

Uses what flax 0.3 linen returned: FrozenDicts (``pop``, ``unfreeze``,
``copy``) and ``EarlyStopping.update``'s tuple.  ``main()`` returns every
number it computed, by name.
"""

import jax
import jax.numpy as jnp
import numpy as np
from flax.training import early_stopping

import models


def main():
  x = jnp.sin(jnp.arange(4 * 4 * 2, dtype=jnp.float32)).reshape(1, 4, 4, 2)
  model = models.ConvNet()
  variables = model.init(jax.random.PRNGKey(0), x)
  state, params = variables.pop('params')
  params = params.unfreeze()
  params['Dense_0']['bias'] = params['Dense_0']['bias'] + 0.5
  variables = state.copy({'params': params})

  def loss_fn(p):
    y, new_state = model.apply(state.copy({'params': p}), x,
                               mutable=['batch_stats'])
    return jnp.sum(y ** 2), new_state

  stop = early_stopping.EarlyStopping(min_delta=1e-3, patience=1)
  out = {}
  for step in range(3):
    (loss, new_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        params)
    params = jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads)
    state = new_state
    stats = new_state.unfreeze()['batch_stats']['BatchNorm_0']
    improved, stop = stop.update(float(loss))
    out[f'loss{step}'] = np.asarray(loss)
    out[f'mean{step}'] = np.asarray(stats['mean'])
    out[f'improved{step}'] = np.asarray(improved)
  out['variables'] = np.asarray(sorted(variables))
  out.update(models.record())
  return out
