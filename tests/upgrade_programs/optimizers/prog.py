"""A legacy program training one small model with each legacy optimizer
(upgraded by tests/test_upgrade_optimizers.py)."""

import jax
import jax.numpy as jnp
from flax import nn
from flax import optim
from flax.training import checkpoints


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
    return optim.Momentum(0.1, beta=0.8, weight_decay=0.01,
                          nesterov=True).create(model)
  if name == 'Adam':
    return optim.Adam(0.01, weight_decay=0.01).create(model)
  if name == 'RMSProp':
    return optim.RMSProp(0.01, beta2=0.8, centered=True).create(model)
  if name == 'Adagrad':
    return optim.Adagrad(0.1).create(model)
  if name == 'LAMB':
    return optim.LAMB(0.01, weight_decay=0.01).create(model)
  if name == 'LARS':
    return optim.LARS(0.5, 0.9, 0.01, nesterov=True).create(model)
  if name == 'AdaBelief':
    return optim.AdaBelief(0.01, weight_decay=0.01).create(model)
  if name == 'Adadelta':
    return optim.Adadelta(1.0, weight_decay=0.01).create(model)
  if name == 'Adafactor':
    return optim.Adafactor(0.1, beta1=0.9,
                           min_dim_size_to_factor=4).create(model)
  if name == 'Multi':
    kernels = optim.ModelParamTraversal(lambda path, _: 'kernel' in path)
    biases = optim.ModelParamTraversal(
        lambda path, _: path.startswith('/Dense_1/bias'))
    kernel_opt = optim.Momentum(0.1, beta=0.9)
    opt_def = optim.MultiOptimizer((kernels, kernel_opt),
                                   (biases, optim.Adam(0.01)))
    return opt_def.create(model)
  raise ValueError(name)


@jax.jit
def train_step(optimizer, x, y):
  def loss_fn(model):
    return jnp.mean((model(x) - y) ** 2)
  grad = jax.grad(loss_fn)(optimizer.target)
  return optimizer.apply_gradient(grad)


def save(ckpt_dir, optimizer):
  checkpoints.save_checkpoint(ckpt_dir, optimizer, 3)


def restore(ckpt_dir, optimizer):
  return checkpoints.restore_checkpoint(ckpt_dir, optimizer)
