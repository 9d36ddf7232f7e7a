"""Re-enacts the end-to-end MNIST example of Flax's first public README.

Only ``import flax`` (legacy names reached as attributes), a per-example loss
vectorised with ``jax.vmap``, the train set streamed through ``tf.data``, the
deprecated ``optimizer.optimize``; ``train()`` prints one line per epoch.
NUM_EPOCHS (env) shortens the fixed 10 epochs for tests.
"""
import os

import jax
import flax
import numpy as onp  # pylint: disable=unused-import
import jax.numpy as jnp
import tensorflow_datasets as tfds


class CNN(flax.nn.Module):

  def apply(self, x):
    x = flax.nn.Conv(x, features=32, kernel_size=(3, 3))
    x = jax.nn.relu(x)
    x = flax.nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
    x = flax.nn.Conv(x, features=64, kernel_size=(3, 3))
    x = flax.nn.relu(x)
    x = flax.nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
    x = x.reshape((x.shape[0], -1))
    x = flax.nn.Dense(x, features=256)
    x = flax.nn.relu(x)
    x = flax.nn.Dense(x, features=10)
    return flax.nn.log_softmax(x)


@jax.vmap
def example_loss(log_probs, label):
  return -log_probs[label]


def metrics_of(log_probs, labels):
  return {'loss': jnp.mean(example_loss(log_probs, labels)),
          'accuracy': jnp.mean(jnp.argmax(log_probs, -1) == labels)}


@jax.jit
def train_step(optimizer, batch):
  def loss_fn(model):
    log_probs = model(batch['image'])
    return jnp.mean(example_loss(log_probs, batch['label'])), log_probs
  optimizer, _, _ = optimizer.optimize(loss_fn)
  return optimizer


@jax.jit
def evaluate(model, eval_ds):
  return metrics_of(model(eval_ds['image'] / 255.0), eval_ds['label'])


def train():
  train_ds = tfds.load('mnist', split=tfds.Split.TRAIN)
  train_ds = train_ds.cache().shuffle(1000).batch(128)
  test_ds = tfds.as_numpy(tfds.load('mnist', split=tfds.Split.TEST,
                                    batch_size=-1))
  _, model = CNN.create_by_shape(jax.random.PRNGKey(0),
                                 [((1, 28, 28, 1), jnp.float32)])
  optimizer = flax.optim.Momentum(learning_rate=0.1, beta=0.9).create(model)
  for epoch in range(int(os.environ.get('NUM_EPOCHS', 10))):
    for batch in tfds.as_numpy(train_ds):
      batch['image'] = batch['image'] / 255.0
      optimizer = train_step(optimizer, batch)
    metrics = evaluate(optimizer.target, test_ds)
    print('eval epoch: %d, loss: %.4f, accuracy: %.2f'
          % (epoch + 1, metrics['loss'], metrics['accuracy'] * 100))


train()
