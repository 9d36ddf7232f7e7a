"""Legacy ``flax.optim.weight_norm``: WeightNorm(wrapped) (v0.2 - v0.3.6
algorithm with the ``mult`` state, Decision D9).

A leaf ``w`` with more than one row (``w.size > w.shape[-1]``) is split into
a direction ``v = w / mult`` and a scale ``s = |w|_r`` (norms over all axes
but the last); the wrapped optimizer updates ``{'direction', 'scale'}`` as
one tree (so an optax-backed wrapped optimizer runs as one transformation),
and the result is merged back: ``mult' = s' / (eps + |v'|_r)``,
``w' = v' mult'``.  Other leaves go to the wrapped optimizer unchanged.
optax has no equivalent; ``as_optax()`` wraps this definition generically.
"""

from typing import Any

from flax import struct
import jax
import jax.numpy as jnp

from flaxlegacy.optim.base import _as_array
from flaxlegacy.optim.base import _flatten_like
from flaxlegacy.optim.base import OptimizerDef


@struct.dataclass
class _WeightNormHyperParams:
  inner: Any
  wn_decay: Any
  wn_eps: Any


@struct.dataclass
class _WeightNormParamState:
  direction_state: Any
  scale_state: Any
  mult: Any


def _decomposed(param):
  return param.size > param.shape[-1]


def _row_norm(x):
  return jnp.sqrt(jnp.square(x).sum(tuple(range(x.ndim - 1)), keepdims=True))


class WeightNorm(OptimizerDef):
  """Adds weight normalization (Salimans & Kingma 2016) to an optimizer."""

  def __init__(self, wrapped_optimizer, wn_decay=0, wn_eps=1e-8):
    super().__init__(_WeightNormHyperParams(wrapped_optimizer.hyper_params,
                                            wn_decay, wn_eps))
    self.wrapped_optimizer = wrapped_optimizer

  def update_hyper_params(self, **hyper_param_overrides):
    decay = hyper_param_overrides.pop('wn_decay', self.hyper_params.wn_decay)
    eps = hyper_param_overrides.pop('wn_eps', self.hyper_params.wn_eps)
    inner = self.wrapped_optimizer.update_hyper_params(**hyper_param_overrides)
    return self.hyper_params.replace(inner=inner, wn_decay=decay, wn_eps=eps)

  @staticmethod
  def _join_states(params, direction_state, scale_state, mults):
    return jax.tree_util.tree_map(
        lambda _, *args: _WeightNormParamState(*args),
        params, direction_state, scale_state, mults)

  def init_state(self, params):
    leaves, treedef = jax.tree_util.tree_flatten(params)
    directions, scales = zip(*(self._split_param(_as_array(p))
                               for p in leaves)) if leaves else ((), ())
    directions = treedef.unflatten(directions)
    scales = treedef.unflatten(scales)
    state = self.wrapped_optimizer.init_state(
        {'direction': directions, 'scale': scales})
    return state.replace(param_states=self._join_states(
        params, state.param_states['direction'],
        state.param_states['scale'], scales))

  def init_param_state(self, param):
    # Legacy WeightNorm had none, so it could not be a MultiOptimizer
    # sub-optimizer in the v0.3.3+ layout (whose init asks each leaf).
    return self.init_state(param).param_states

  def apply_gradient(self, hyper_params, params, state, grads):
    p_leaves, treedef = jax.tree_util.tree_flatten(params)
    s_leaves = _flatten_like(treedef, state.param_states,
                             'optimizer param_states')
    g_leaves = _flatten_like(treedef, grads, 'gradient')
    split = [self._split_grad(_as_array(p), s, _as_array(g),
                              hyper_params.wn_decay)
             for p, s, g in zip(p_leaves, s_leaves, g_leaves)]
    d_p, d_s, d_g, s_p, s_s, s_g = (
        [treedef.unflatten(x) for x in zip(*split)] if split
        else [treedef.unflatten(())] * 6)
    new_wn_params, new_state = self.wrapped_optimizer.apply_gradient(
        hyper_params.inner, {'direction': d_p, 'scale': s_p},
        state.replace(param_states={'direction': d_s, 'scale': s_s}),
        {'direction': d_g, 'scale': s_g})
    directions = treedef.flatten_up_to(new_wn_params['direction'])
    scales = treedef.flatten_up_to(new_wn_params['scale'])
    merged = [self._merge_param(d, s, hyper_params.wn_eps)
              for d, s in zip(directions, scales)]
    new_params, mults = ([treedef.unflatten(x) for x in zip(*merged)]
                         if merged else [treedef.unflatten(())] * 2)
    return new_params, new_state.replace(param_states=self._join_states(
        params, new_state.param_states['direction'],
        new_state.param_states['scale'], mults))

  def _split_param(self, param):
    if _decomposed(param):
      scale = _row_norm(param)
      return param / scale, scale
    return param, ()

  def _merge_param(self, direction, scale, eps):
    if _decomposed(direction):
      mult = scale / (eps + _row_norm(direction))
      return direction * mult, mult
    return direction, ()

  def _split_grad(self, param, state, grad, decay):
    """(direction, its state, its grad, scale, its state, its grad)."""
    if not _decomposed(param):
      return param, state.direction_state, grad, (), (), ()
    red_dims = tuple(range(param.ndim - 1))
    direction = param / state.mult
    scale = _row_norm(param) * jnp.sign(state.mult)
    scale_grad = jnp.sum(grad * direction, axis=red_dims, keepdims=True)
    direction_grad = state.mult * (grad - scale_grad * direction)
    if decay != 0:
      direction_grad = direction_grad + decay * direction
    return (direction, state.direction_state, direction_grad,
            scale, state.scale_state, scale_grad)
