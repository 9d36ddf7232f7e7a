"""Trains a small convolutional network on MNIST, written in legacy Flax.

This program uses only the 2020 API (``flax.nn`` modules with ``apply``,
``Module.create_by_shape``, ``flax.optim.Momentum``, ``optimizer.optimize``)
and TFDS as the legacy examples did; under flaxlegacy it runs as it is.

Data: ``tfds.load('mnist')``.  Offline, prepare it first with
``flaxlegacy data mnist`` (see README.md).
"""

from absl import app
from absl import flags
from absl import logging

from flax import nn
from flax import optim

import jax
from jax import random
import jax.numpy as jnp

import numpy as onp

import tensorflow_datasets as tfds


FLAGS = flags.FLAGS

flags.DEFINE_float('learning_rate', 0.1,
                   'Learning rate of the momentum optimizer.')
flags.DEFINE_float('momentum', 0.9,
                   'Momentum (beta) of the momentum optimizer.')
flags.DEFINE_integer('batch_size', 128, 'Training batch size.')
flags.DEFINE_integer('num_epochs', 10, 'Number of passes over the train set.')
flags.DEFINE_integer('seed', 0, 'Seed of the PRNG key (init and shuffling).')
flags.DEFINE_string('model_dir', None,
                    'If set, TensorBoard summaries are written there.')


class CNN(nn.Module):
  """Two 3x3 convolutions with average pooling, then two dense layers."""

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


def create_model(key):
  _, model = CNN.create_by_shape(key, [((1, 28, 28, 1), jnp.float32)])
  return model


def create_optimizer(model, learning_rate, beta):
  return optim.Momentum(learning_rate=learning_rate, beta=beta).create(model)


def cross_entropy_loss(log_probs, labels):
  one_hot = jax.nn.one_hot(labels, log_probs.shape[-1])
  return -jnp.mean(jnp.sum(one_hot * log_probs, axis=-1))


def compute_metrics(log_probs, labels):
  return {
      'loss': cross_entropy_loss(log_probs, labels),
      'accuracy': jnp.mean(jnp.argmax(log_probs, -1) == labels),
  }


@jax.jit
def train_step(optimizer, batch):
  """One optimizer step on one batch; returns the new optimizer, metrics."""
  def loss_fn(model):
    log_probs = model(batch['image'])
    return cross_entropy_loss(log_probs, batch['label']), log_probs
  optimizer, _, log_probs = optimizer.optimize(loss_fn)
  return optimizer, compute_metrics(log_probs, batch['label'])


@jax.jit
def eval_step(model, batch):
  return compute_metrics(model(batch['image']), batch['label'])


def train_epoch(optimizer, train_ds, batch_size, rng):
  """One pass over a shuffled train set (the last partial batch is dropped)."""
  num_examples = len(train_ds['image'])
  steps = num_examples // batch_size
  order = random.permutation(rng, num_examples)[:steps * batch_size]
  batch_metrics = []
  for indices in onp.asarray(order).reshape((steps, batch_size)):
    batch = {k: v[indices] for k, v in train_ds.items()}
    optimizer, metrics = train_step(optimizer, batch)
    batch_metrics.append(metrics)
  batch_metrics = jax.device_get(batch_metrics)
  epoch_metrics = {k: float(onp.mean([m[k] for m in batch_metrics]))
                   for k in batch_metrics[0]}
  return optimizer, epoch_metrics


def eval_model(model, test_ds):
  metrics = jax.device_get(eval_step(model, test_ds))
  return float(metrics['loss']), float(metrics['accuracy'])


def load_split(split):
  """A whole split as NumPy arrays, images scaled to [0, 1]."""
  ds, info = tfds.load('mnist', split=split, batch_size=-1, with_info=True)
  data = tfds.as_numpy(ds)
  data['image'] = onp.float32(data['image']) / 255.
  return data, info


def get_datasets():
  train_ds, info = load_split('train')
  test_ds, _ = load_split('test')
  logging.info('dataset: %s', info.description)
  logging.info('train examples: %d, test examples: %d',
               len(train_ds['label']), len(test_ds['label']))
  return train_ds, test_ds


def train(train_ds, test_ds):
  """Trains for FLAGS.num_epochs; returns the optimizer and final accuracy."""
  if FLAGS.batch_size > len(train_ds['image']):
    raise ValueError(f'--batch_size={FLAGS.batch_size} is larger than the '
                     f'train set ({len(train_ds["image"])} examples)')
  rng, init_rng = random.split(random.PRNGKey(FLAGS.seed))
  optimizer = create_optimizer(create_model(init_rng), FLAGS.learning_rate,
                               FLAGS.momentum)
  summary_writer = None
  if FLAGS.model_dir:
    from flax.metrics import tensorboard  # pylint: disable=g-import-not-at-top
    summary_writer = tensorboard.SummaryWriter(FLAGS.model_dir)

  accuracy = None
  for epoch in range(1, FLAGS.num_epochs + 1):
    rng, epoch_rng = random.split(rng)
    optimizer, train_metrics = train_epoch(optimizer, train_ds,
                                           FLAGS.batch_size, epoch_rng)
    loss, accuracy = eval_model(optimizer.target, test_ds)
    logging.info('epoch %d  train loss: %.4f, accuracy: %.2f  |  '
                 'test loss: %.4f, accuracy: %.2f', epoch,
                 train_metrics['loss'], train_metrics['accuracy'] * 100,
                 loss, accuracy * 100)
    if summary_writer is not None:
      for name, value in (('train_loss', train_metrics['loss']),
                          ('train_accuracy', train_metrics['accuracy']),
                          ('eval_loss', loss), ('eval_accuracy', accuracy)):
        summary_writer.scalar(name, value, epoch)
  if summary_writer is not None:
    summary_writer.flush()
  return optimizer, accuracy


def main(argv):
  if len(argv) > 1:
    raise app.UsageError('Too many command-line arguments.')
  train_ds, test_ds = get_datasets()
  _, accuracy = train(train_ds, test_ds)
  if accuracy is not None:
    logging.info('final test accuracy: %.2f%%', accuracy * 100)


if __name__ == '__main__':
  app.run(main)
