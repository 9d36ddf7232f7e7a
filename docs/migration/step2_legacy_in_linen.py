"""MNIST, migration step 2: a linen model around the legacy conv trunk.

The model is now a linen ``Module``; the convolutional trunk is still the
legacy ``flax.nn`` code, used inside linen through
``flaxlegacy.migrate.LegacyModule``, while the classifier head is written in
linen.  The optimizer is plain ``optax.sgd(lr, momentum=beta)`` (the same
arithmetic as legacy ``Momentum``).  Port the rest the same way, one
submodule at a time; each step trains to the same numbers.

Run: ``python docs/migration/step2_legacy_in_linen.py --num_epochs=1``.
"""

import os
import sys

from absl import logging
from flax import linen
from flax import nn
from flax.training import checkpoints
from flax.training import train_state
import jax
from jax import random
import jax.numpy as jnp
import optax

from flaxlegacy import migrate

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mnist_common as common  # noqa: E402  pylint: disable=g-import-not-at-top


class ConvTrunk(nn.Module):
  """The legacy part still in use: the first half of the legacy CNN."""

  def apply(self, x):
    for features in (32, 64):
      x = nn.Conv(x, features=features, kernel_size=(3, 3))
      x = nn.relu(x)
      x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
    return x


class CNN(linen.Module):
  """The legacy trunk (params under 'trunk') and a linen head."""

  @linen.compact
  def __call__(self, x):
    x = migrate.LegacyModule(ConvTrunk, name='trunk')(x)
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


def params_from_legacy(legacy_params):
  """Legacy CNN params (Conv_0, Conv_1, Dense_2, Dense_3) in this layout."""
  p = migrate.linen_params(legacy_params)
  return {'trunk': {'Conv_0': p['Conv_0'], 'Conv_1': p['Conv_1']},
          'Dense_0': p['Dense_0'], 'Dense_1': p['Dense_1']}


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
