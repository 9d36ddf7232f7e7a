"""A legacy program that sets the learning rate at every step (upgraded by
tests/test_upgrade_optimizers.py)."""

import jax
import jax.numpy as jnp
from flax import nn
from flax import optim


class MLP(nn.Module):

  def apply(self, x):
    x = nn.Dense(x, 8)
    x = nn.tanh(x)
    return nn.Dense(x, 3)


def create_model(key):
  _, initial_params = MLP.init_by_shape(key, [((2, 4), jnp.float32)])
  return nn.Model(MLP, initial_params)


def create_optimizer(name, model):
  if name == 'Momentum':
    return optim.Momentum(beta=0.8).create(model)
  if name == 'MomentumDecay':
    return optim.Momentum(beta=0.8, weight_decay=0.01).create(model)
  if name == 'LAMB':
    return optim.LAMB(weight_decay=0.01).create(model)
  if name == 'Adagrad':
    return optim.Adagrad().create(model)
  if name == 'Adafactor':
    return optim.Adafactor(beta1=0.9, min_dim_size_to_factor=4).create(model)
  raise ValueError(name)


@jax.jit
def train_step(optimizer, x, y, lr):
  def loss_fn(model):
    return jnp.mean((model(x) - y) ** 2)
  grad = jax.grad(loss_fn)(optimizer.target)
  return optimizer.apply_gradient(grad, learning_rate=lr)
