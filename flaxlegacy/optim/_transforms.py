"""The few legacy update rules optax does not compute, as optax transforms.

Each is a small ``GradientTransformation`` meant to be chained with optax's
own pieces (spec §7-8 says where optax differs):

* ``scale_by_legacy_adagrad``: ``g / (sqrt(G') + eps)`` - optax's adagrad
  puts eps inside the root (and starts G at 0.1);
* ``scale_by_legacy_trust_ratio``: LAMB's ratio ``|p| / |u|``, which is
  0 when ``|p| = 0`` (zero-initialised leaves never move) and 1 only when
  both norms are 0 - optax uses 1 whenever either norm is 0;
* ``scale_by_legacy_lars_trust_ratio``: LARS's ratio
  ``tc |p| / (|g| + wd |p| + eps)`` on the raw gradient, then the coupled
  decay ``g + wd p`` - optax's ratio uses ``|g + wd p|``.
"""

import jax
import jax.numpy as jnp
import optax


def scale_by_legacy_adagrad(eps=1e-8):
  """Adagrad scaling with eps outside the root; state ``sum_of_squares``."""

  def init_fn(params):
    return optax.ScaleByRssState(
        sum_of_squares=jax.tree_util.tree_map(jnp.zeros_like, params))

  def update_fn(updates, state, params=None):
    del params
    sum_sq = jax.tree_util.tree_map(lambda g, s: s + jnp.square(g), updates,
                                    state.sum_of_squares)
    updates = jax.tree_util.tree_map(lambda g, s: g / (jnp.sqrt(s) + eps),
                                     updates, sum_sq)
    return updates, optax.ScaleByRssState(sum_of_squares=sum_sq)

  return optax.GradientTransformation(init_fn, update_fn)


def scale_by_legacy_trust_ratio():
  """LAMB's layer-wise trust ratio ``|p| / |u|`` (1 iff both are 0)."""

  def update_fn(updates, state, params):
    if params is None:
      raise ValueError('scale_by_legacy_trust_ratio needs params')

    def scale(u, p):
      p_norm = jnp.linalg.norm(p)
      u_norm = jnp.linalg.norm(u)
      ratio = jnp.where(p_norm + u_norm > 0., p_norm / u_norm, 1.)
      return ratio * u

    return jax.tree_util.tree_map(scale, updates, params), state

  return optax.GradientTransformation(optax.init_empty_state, update_fn)


def scale_by_legacy_lars_trust_ratio(weight_decay=0., trust_coefficient=1e-3,
                                     eps=0.):
  """LARS's ratio on the raw gradient, then the coupled weight decay."""

  def update_fn(updates, state, params):
    if params is None:
      raise ValueError('scale_by_legacy_lars_trust_ratio needs params')

    def scale(g, p):
      p_norm = jnp.linalg.norm(p)
      g_norm = jnp.linalg.norm(g)
      ratio = trust_coefficient * p_norm / (
          g_norm + weight_decay * p_norm + eps)
      # v0.2.2+ guard (Decision D12).
      ratio = jnp.where(jnp.logical_or(g_norm == 0., p_norm == 0.), 1., ratio)
      if weight_decay != 0:
        g = g + weight_decay * p
      return ratio * g

    return jax.tree_util.tree_map(scale, updates, params), state

  return optax.GradientTransformation(optax.init_empty_state, update_fn)


def in_float32(tx):
  """Runs ``tx`` on float32 copies of params and updates (Adafactor keeps
  its statistics in float32 whatever the parameter dtype); a no-op for
  float32 trees."""

  def cast(tree):
    return jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32), tree)

  def init_fn(params):
    return tx.init(cast(params))

  def update_fn(updates, state, params=None):
    return tx.update(cast(updates), state,
                     None if params is None else cast(params))

  return optax.GradientTransformation(init_fn, update_fn)
