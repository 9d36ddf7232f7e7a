"""A legacy program training one small model with user-written optimizer
definitions (upgraded by tests/test_upgrade_user_optimizers.py).

The three definitions have the structure of those in 2020-2021 research
code, written here for the test: an RMSProp with momentum whose second
moment starts at one (EfficientNet's, in the SAM code), a stochastic
gradient MCMC sampler drawing its noise with ``nn.make_rng()`` and choosing
between two hyper-parameter dataclasses (cold posterior's), and a blocked
preconditioner whose ``apply_gradient`` computes every parameter's
preconditioner in one batched step (Shampoo's).
"""

import enum

import jax
from jax import lax
import jax.numpy as jnp
import numpy as onp
from flax import nn
from flax import optim
from flax import struct
from flax.optim import OptimizerDef
from flax.optim.base import OptimizerState
from flax.training import checkpoints


class MLP(nn.Module):

  def apply(self, x):
    x = nn.Dense(x, 6)
    x = nn.tanh(x)
    return nn.Dense(x, 3)


def create_model(key):
  _, initial_params = MLP.init_by_shape(key, [((2, 4), jnp.float32)])
  return nn.Model(MLP, initial_params)


# --- 1. RMSProp with momentum, second moment initialised to one ------------


@struct.dataclass
class _MomentumRMSHyperParams:
  learning_rate: float
  beta: float
  beta2: float
  eps: float


@struct.dataclass
class _MomentumRMSParamState:
  v: onp.ndarray
  momentum: onp.ndarray


class MomentumRMS(optim.OptimizerDef):
  """RMSProp with heavy-ball momentum; the average of g^2 starts at 1."""

  def __init__(self, learning_rate=None, beta=0.0, beta2=0.9, eps=1e-8):
    """Builds the definition.

    Args:
      learning_rate: step size.
      beta: momentum.
      beta2: decay of the average of the squared gradient.
      eps: added under the root.
    """
    hyper_params = _MomentumRMSHyperParams(learning_rate, beta, beta2, eps)
    super().__init__(hyper_params)

  def init_param_state(self, param):
    return _MomentumRMSParamState(jnp.ones_like(param), jnp.zeros_like(param))

  def apply_param_gradient(self, step, hyper_params, param, state, grad):
    assert hyper_params.learning_rate is not None, 'no learning rate'
    v = hyper_params.beta2 * state.v + (1. - hyper_params.beta2) * grad ** 2
    scaled = grad / jnp.sqrt(v + hyper_params.eps)
    momentum = hyper_params.beta * state.momentum + scaled
    return (param - hyper_params.learning_rate * momentum,
            _MomentumRMSParamState(v, momentum))


# --- 2. a sampler: noise from nn.make_rng(), two parametrisations ----------


@struct.dataclass
class _LangevinDLParams:
  learning_rate: float
  beta: float
  weight_decay: float
  train_size: float
  temperature: float

  @property
  def step_size(self):
    return jnp.sqrt(self.learning_rate / self.train_size)

  @property
  def friction(self):
    return (1. - self.beta) * jnp.sqrt(self.train_size / self.learning_rate)


@struct.dataclass
class _LangevinSDEParams:
  step_size: float
  friction: float
  weight_decay: float
  train_size: float
  temperature: float


@struct.dataclass
class _LangevinState:
  momentum: onp.ndarray
  preconditioner: onp.ndarray


class Langevin(OptimizerDef):
  """Underdamped Langevin dynamics, symplectic Euler steps."""
  needs_rng = True

  def __init__(self, train_size, init_rng, learning_rate=None, beta=0.9,
               weight_decay=0, temperature=1.0, step_size=None,
               friction=None):
    if learning_rate is not None:
      hyper_params = _LangevinDLParams(learning_rate, beta, weight_decay,
                                       train_size, temperature)
    elif step_size is not None and friction is not None:
      hyper_params = _LangevinSDEParams(step_size, friction, weight_decay,
                                        train_size, temperature)
    else:
      raise ValueError('give learning_rate, or step_size and friction')
    self.init_rng = init_rng
    super().__init__(hyper_params)

  def init_param_state(self, param):
    return _LangevinState(
        jax.random.normal(nn.make_rng(), param.shape, param.dtype),
        jnp.ones_like(param))

  def apply_param_gradient(self, step, hyper_params, param, state, grad):
    del step
    if hyper_params.weight_decay != 0:
      raise NotImplementedError('weight decay')
    noise = jax.random.normal(nn.make_rng(), param.shape, param.dtype)
    h = hyper_params.step_size
    gamma = hyper_params.friction
    n = hyper_params.train_size
    momentum = ((1 - h * gamma) * state.momentum - h * n * grad
                + jnp.sqrt(2 * gamma * h * hyper_params.temperature)
                * jnp.sqrt(state.preconditioner) * noise)
    new_param = param + h / state.preconditioner * momentum
    return new_param, _LangevinState(momentum, state.preconditioner)


# --- 3. blocked preconditioners, computed for all parameters at once --------


class Grafting(enum.Enum):
  SGD = 1
  ADAGRAD = 2


@struct.dataclass
class _BlockHyperParams:
  learning_rate: float
  beta1: float
  beta2: float
  matrix_eps: float
  block_size: int
  statistics_every: int
  graft: Grafting
  nesterov: bool


@struct.dataclass
class _BlockState:
  diagonal: onp.ndarray
  statistics: list
  preconditioners: list
  momentum: onp.ndarray


class Blocks:
  """Splits a parameter (first axis) into blocks of at most block_size."""

  def __init__(self, param, hps):
    self.rows = param.shape[0]
    self.cuts = list(range(hps.block_size, self.rows, hps.block_size))

  def split(self, x):
    return jnp.split(x.reshape(self.rows, -1), self.cuts, axis=0)

  def sizes(self):
    edges = [0] + self.cuts + [self.rows]
    return [b - a for a, b in zip(edges, edges[1:])]


def inverse_root(mat, eps, p=4):
  """mat^(-1/p) of a symmetric PSD matrix, through its eigenvalues."""
  w, v = jnp.linalg.eigh(mat + eps * jnp.eye(mat.shape[0], dtype=mat.dtype))
  return (v * jnp.maximum(w, eps) ** (-1. / p)) @ v.T


class BlockPreconditioned(OptimizerDef):
  """Left preconditioning of each block with (sum g g^T)^(-1/4), grafted to
  the SGD or Adagrad step size, with momentum."""

  def __init__(self, learning_rate=None, beta1=0.9, beta2=1.0,
               matrix_eps=1e-4, block_size=4, statistics_every=1,
               graft=Grafting.SGD, nesterov=False):
    hps = _BlockHyperParams(learning_rate, beta1, beta2, matrix_eps,
                            block_size, statistics_every, graft, nesterov)
    super().__init__(hps)

  def _skip(self, param):
    return param.ndim < 1

  def init_param_state(self, param):
    statistics, preconditioners = [], []
    if not self._skip(param):
      for size in Blocks(param, self.hyper_params).sizes():
        statistics.append(self.hyper_params.matrix_eps * jnp.eye(size))
        preconditioners.append(jnp.eye(size))
    return _BlockState(jnp.zeros_like(param), statistics, preconditioners,
                       jnp.zeros_like(param))

  def fast_cond(self, predicate, fn, init):
    """fn() where predicate holds, else init, in one while loop."""
    def body(state):
      return tuple([False] + list(fn()))
    out = lax.while_loop(lambda s: s[0], body, tuple([predicate] + init))
    return list(out[1:])

  def compute_statistics(self, step, hps, param, state, grad):
    if self._skip(param):
      return state
    def update():
      return [hps.beta2 * s + g @ g.T
              for s, g in zip(state.statistics, Blocks(param, hps).split(grad))]
    if hps.statistics_every > 1:
      new = self.fast_cond(step % hps.statistics_every == 0, update,
                           state.statistics)
    else:
      new = update()
    return state.replace(statistics=new)

  def compute_preconditioners(self, states, hps):
    stats = [s for state in states for s in state.statistics]
    if not stats:
      return states
    size = max(s.shape[0] for s in stats)
    def pad(m):  # [[m, 0], [0, I]]
      n = m.shape[0]
      return jnp.eye(size, dtype=m.dtype).at[:n, :n].set(m)
    roots = jax.vmap(lambda m: inverse_root(m, hps.matrix_eps))(
        jnp.stack([pad(s) for s in stats]))
    out, i = [], 0
    for state in states:
      n = len(state.statistics)
      new = [roots[i + j][:s.shape[0], :s.shape[0]]
             for j, s in enumerate(state.statistics)]
      out.append(state.replace(preconditioners=new))
      i += n
    return out

  def apply_per_param(self, step, hps, param, state, grad):
    diagonal = state.diagonal + grad ** 2
    if hps.graft == Grafting.ADAGRAD:
      graft = grad / (jnp.sqrt(diagonal) + 1e-10)
    else:
      graft = grad
    if self._skip(param):
      direction = graft
    else:
      blocks = Blocks(param, hps)
      pieces = [p @ g for p, g in zip(state.preconditioners,
                                      blocks.split(grad))]
      direction = jnp.concatenate(pieces, axis=0).reshape(param.shape)
      direction = direction * (jnp.linalg.norm(graft)
                               / (jnp.linalg.norm(direction) + 1e-16))
    momentum = hps.beta1 * state.momentum + direction
    update = direction + hps.beta1 * momentum if hps.nesterov else momentum
    return (param - hps.learning_rate * update,
            state.replace(diagonal=diagonal, momentum=momentum))

  def apply_gradient(self, hyper_params, params, state, grads):
    step = state.step
    params_flat, treedef = jax.tree_flatten(params)
    states_flat = treedef.flatten_up_to(state.param_states)
    grads_flat = treedef.flatten_up_to(grads)
    states_flat = [
        self.compute_statistics(step, hyper_params, p, s, g)
        for p, s, g in zip(params_flat, states_flat, grads_flat)]
    states_flat = self.compute_preconditioners(states_flat, hyper_params)
    out = [self.apply_per_param(step, hyper_params, p, s, g)
           for p, s, g in zip(params_flat, states_flat, grads_flat)]
    new_params, new_states = zip(*out)
    return (jax.tree_unflatten(treedef, new_params),
            OptimizerState(step + 1, jax.tree_unflatten(treedef, new_states)))


# --- the program --------------------------------------------------------------


def create_optimizer(name, model):
  if name == 'MomentumRMS':
    return MomentumRMS(learning_rate=0.05, beta=0.7, beta2=0.8,
                       eps=1e-3).create(model)
  if name == 'Langevin':
    with nn.stochastic(jax.random.PRNGKey(7)):
      return Langevin(100., jax.random.PRNGKey(3), learning_rate=0.01,
                      beta=0.8, temperature=1e-3).create(model)
  if name == 'Blocks':
    optimizer_def = BlockPreconditioned(0.1, block_size=4,
                                        statistics_every=2,
                                        graft=Grafting.ADAGRAD, nesterov=True)
    return optimizer_def.create(model)
  raise ValueError(name)


@jax.jit
def train_step(optimizer, x, y):
  def loss_fn(model):
    return jnp.mean((model(x) - y) ** 2)
  grad = jax.grad(loss_fn)(optimizer.target)
  rng = jax.random.fold_in(jax.random.PRNGKey(11), optimizer.state.step)
  with nn.stochastic(rng):
    return optimizer.apply_gradient(grad)


def save(ckpt_dir, optimizer):
  checkpoints.save_checkpoint(ckpt_dir, optimizer, 3)


def restore(ckpt_dir, optimizer):
  return checkpoints.restore_checkpoint(ckpt_dir, optimizer)
