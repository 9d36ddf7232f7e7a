"""What the MNIST migration steps share and never change: data and metrics.

These are the parts of ``examples/mnist/train.py`` that use no Flax at all
(TFDS input, cross-entropy, accuracy, the shuffled epoch loop), so the step
programs beside this file differ from the example only where Flax is used.
"""

import jax
from jax import random
import jax.numpy as jnp
import numpy as onp


def cross_entropy_loss(log_probs, labels):
  one_hot = jax.nn.one_hot(labels, log_probs.shape[-1])
  return -jnp.mean(jnp.sum(one_hot * log_probs, axis=-1))


def compute_metrics(log_probs, labels):
  return {
      'loss': cross_entropy_loss(log_probs, labels),
      'accuracy': jnp.mean(jnp.argmax(log_probs, -1) == labels),
  }


def train_epoch(train_step, state, train_ds, batch_size, rng):
  """One pass over a shuffled train set (the last partial batch is dropped).

  ``state`` is whatever ``train_step(state, batch) -> (state, metrics)``
  carries: a legacy Optimizer or a TrainState.
  """
  num_examples = len(train_ds['image'])
  steps = num_examples // batch_size
  order = random.permutation(rng, num_examples)[:steps * batch_size]
  batch_metrics = []
  for indices in onp.asarray(order).reshape((steps, batch_size)):
    batch = {k: v[indices] for k, v in train_ds.items()}
    state, metrics = train_step(state, batch)
    batch_metrics.append(metrics)
  batch_metrics = jax.device_get(batch_metrics)
  epoch_metrics = {k: float(onp.mean([m[k] for m in batch_metrics]))
                   for k in batch_metrics[0]}
  return state, epoch_metrics


def get_datasets():
  """MNIST train and test splits as NumPy arrays, images scaled to [0, 1].

  Offline, prepare the data first with ``flaxlegacy data mnist``.
  """
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  splits = []
  for split in ('train', 'test'):
    data = tfds.as_numpy(tfds.load('mnist', split=split, batch_size=-1))
    data['image'] = onp.float32(data['image']) / 255.
    splits.append(data)
  return tuple(splits)


def run(train_fn):
  """``main`` of every step: flags, data, training, final accuracy."""
  from absl import app  # pylint: disable=g-import-not-at-top
  from absl import flags  # pylint: disable=g-import-not-at-top
  from absl import logging  # pylint: disable=g-import-not-at-top
  flags.DEFINE_float('learning_rate', 0.1, 'Learning rate.')
  flags.DEFINE_float('momentum', 0.9, 'Momentum (beta).')
  flags.DEFINE_integer('batch_size', 128, 'Training batch size.')
  flags.DEFINE_integer('num_epochs', 10, 'Passes over the train set.')
  flags.DEFINE_integer('seed', 0, 'Seed of the PRNG key.')
  flags.DEFINE_string('workdir', None, 'Checkpoints are saved (and restored '
                      'from) here, when set.')

  def main(argv):
    if len(argv) > 1:
      raise app.UsageError('Too many command-line arguments.')
    cfg = flags.FLAGS
    train_ds, test_ds = get_datasets()
    _, accuracy = train_fn(
        train_ds, test_ds, learning_rate=cfg.learning_rate,
        momentum=cfg.momentum, batch_size=cfg.batch_size,
        num_epochs=cfg.num_epochs, seed=cfg.seed, workdir=cfg.workdir)
    logging.info('final test accuracy: %.2f%%', accuracy * 100)

  app.run(main)
