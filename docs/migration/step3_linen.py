"""MNIST, migration step 3: linen + optax only (flaxlegacy no longer needed).

The whole CNN is linen, the optimizer optax, checkpoints today's Flax/Orbax.
Nothing here imports flax.nn, flax.optim or flaxlegacy.  To go on training a
model trained by the legacy program, convert its checkpoint once::

    flaxlegacy convert LEGACY_DIR WORKDIR --optimizer Momentum \
        --hparam beta=0.9

and run this program with ``--workdir=WORKDIR``: it restores the converted
TrainState (legacy auto-named ``Dense_2, Dense_3`` are linen's ``Dense_0,
Dense_1``) and continues from its step.

Run: ``python docs/migration/step3_linen.py --num_epochs=1``.
"""

import os
import sys

from absl import logging
from flax import linen
from flax.training import checkpoints
from flax.training import train_state
import jax
from jax import random
import jax.numpy as jnp
import optax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mnist_common as common  # noqa: E402  pylint: disable=g-import-not-at-top


class CNN(linen.Module):
  """The legacy CNN in linen: same layers, linen's per-class names."""

  @linen.compact
  def __call__(self, x):
    for features in (32, 64):
      x = linen.Conv(features=features, kernel_size=(3, 3))(x)
      x = linen.relu(x)
      x = linen.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
    x = x.reshape((x.shape[0], -1))
    x = linen.Dense(features=256)(x)
    x = linen.relu(x)
    x = linen.Dense(features=10)(x)
    return linen.log_softmax(x)


def create_train_state(key, learning_rate, momentum, params=None):
  model = CNN()
  if params is None:
    params = model.init(key, jnp.ones((1, 28, 28, 1)))['params']
  return train_state.TrainState.create(
      apply_fn=model.apply, params=params,
      tx=optax.sgd(learning_rate, momentum=momentum))


@jax.jit
def train_step(state, batch):
  def loss_fn(params):
    log_probs = state.apply_fn({'params': params}, batch['image'])
    return common.cross_entropy_loss(log_probs, batch['label']), log_probs
  (_, log_probs), grads = jax.value_and_grad(loss_fn, has_aux=True)(
      state.params)
  state = state.apply_gradients(grads=grads)
  return state, common.compute_metrics(log_probs, batch['label'])


@jax.jit
def eval_step(params, batch):
  return common.compute_metrics(CNN().apply({'params': params},
                                            batch['image']), batch['label'])


def train(train_ds, test_ds, learning_rate, momentum, batch_size, num_epochs,
          seed, workdir=None, state=None):
  """Trains; returns the TrainState and the final test accuracy."""
  rng, init_rng = random.split(random.PRNGKey(seed))
  if state is None:
    state = create_train_state(init_rng, learning_rate, momentum)
  if workdir:
    # A converted legacy checkpoint (or one of this program's) restores here.
    state = checkpoints.restore_checkpoint(os.path.abspath(workdir), state)
    logging.info('starting at step %d', int(state.step))
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
      checkpoints.save_checkpoint(os.path.abspath(workdir), state,
                                  int(state.step), keep=2)
  return state, accuracy


if __name__ == '__main__':
  common.run(train)
