"""MNIST, migration step 1: ``flax.optim`` -> ``TrainState`` + optax.

The model is still the legacy ``flax.nn`` CNN of examples/mnist/train.py;
only the optimizer changes.  ``flaxlegacy.migrate.to_train_state`` turns the
legacy ``Optimizer`` into a ``flax.training.train_state.TrainState`` whose
``tx`` is legacy Momentum as an optax transformation (same numbers as
``optimizer.apply_gradient``) and whose ``apply_fn`` is ``CNN.call``.  It
works the same on an optimizer restored from a legacy checkpoint.

Run: ``python docs/migration/step1_train_state.py --num_epochs=1``.
"""

import os
import sys

from absl import logging
from flax import nn
from flax import optim
from flax.training import checkpoints
import jax
from jax import random
import jax.numpy as jnp

from flaxlegacy import migrate

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mnist_common as common  # noqa: E402  pylint: disable=g-import-not-at-top


class CNN(nn.Module):
  """Unchanged from examples/mnist/train.py."""

  def apply(self, x):
    for features in (32, 64):
      x = nn.Conv(x, features=features, kernel_size=(3, 3))
      x = nn.relu(x)
      x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
    x = x.reshape((x.shape[0], -1))
    x = nn.Dense(x, features=256)
    x = nn.relu(x)
    x = nn.Dense(x, features=10)
    return nn.log_softmax(x)


def create_train_state(key, learning_rate, momentum):
  _, model = CNN.create_by_shape(key, [((1, 28, 28, 1), jnp.float32)])
  optimizer = optim.Momentum(learning_rate=learning_rate,
                             beta=momentum).create(model)
  # Step 1: the legacy optimizer becomes a TrainState.
  return migrate.to_train_state(optimizer)


@jax.jit
def train_step(state, batch):
  def loss_fn(params):
    log_probs = state.apply_fn(params, batch['image'])
    return common.cross_entropy_loss(log_probs, batch['label']), log_probs
  (_, log_probs), grads = jax.value_and_grad(loss_fn, has_aux=True)(
      state.params)
  state = state.apply_gradients(grads=grads)
  return state, common.compute_metrics(log_probs, batch['label'])


@jax.jit
def eval_step(params, batch):
  return common.compute_metrics(CNN.call(params, batch['image']),
                                batch['label'])


def train(train_ds, test_ds, learning_rate, momentum, batch_size, num_epochs,
          seed, workdir=None, state=None):
  """Trains; returns the TrainState and the final test accuracy."""
  rng, init_rng = random.split(random.PRNGKey(seed))
  if state is None:
    state = create_train_state(init_rng, learning_rate, momentum)
  accuracy = None
  for epoch in range(1, num_epochs + 1):
    rng, epoch_rng = random.split(rng)
    state, train_metrics = common.train_epoch(train_step, state, train_ds,
                                              batch_size, epoch_rng)
    metrics = jax.device_get(eval_step(state.params, test_ds))
    accuracy = float(metrics['accuracy'])
    logging.info('epoch %d  train loss %.4f  test accuracy %.2f', epoch,
                 train_metrics['loss'], accuracy * 100)
    if workdir:
      checkpoints.save_checkpoint(workdir, state, int(state.step), keep=2)
  return state, accuracy


if __name__ == '__main__':
  common.run(train)
