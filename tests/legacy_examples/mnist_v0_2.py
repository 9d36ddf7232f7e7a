"""Re-enacts examples/mnist/train.py of legacy Flax v0.2."""
from absl import app
from absl import flags
from absl import logging

from flax import nn
from flax import optim
from flax.metrics import tensorboard

import jax
from jax import random
import jax.numpy as jnp

import numpy as onp

import tensorflow_datasets as tfds

FLAGS = flags.FLAGS
flags.DEFINE_float('learning_rate', 0.1, 'momentum optimizer learning rate')
flags.DEFINE_float('momentum', 0.9, 'momentum optimizer beta')
flags.DEFINE_integer('batch_size', 128, 'batch size')
flags.DEFINE_integer('num_epochs', 10, 'epochs')
flags.DEFINE_string('model_dir', None, 'where summaries go')


class CNN(nn.Module):

  def apply(self, x):
    x = nn.relu(nn.Conv(x, features=32, kernel_size=(3, 3)))
    x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
    x = nn.relu(nn.Conv(x, features=64, kernel_size=(3, 3)))
    x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
    x = x.reshape((x.shape[0], -1))
    x = nn.relu(nn.Dense(x, features=256))
    return nn.log_softmax(nn.Dense(x, features=10))


def create_model(key):
  _, params = CNN.init_by_shape(key, [((1, 28, 28, 1), jnp.float32)])
  return nn.Model(CNN, params)


def cross_entropy(log_probs, labels):
  one_hot = (labels[..., None] == jnp.arange(10)[None]).astype(jnp.float32)
  return -jnp.mean(jnp.sum(one_hot * log_probs, axis=-1))


def compute_metrics(log_probs, labels):
  return {'loss': cross_entropy(log_probs, labels),
          'accuracy': jnp.mean(jnp.argmax(log_probs, -1) == labels)}


@jax.jit
def train_step(optimizer, batch):
  def loss_fn(model):
    log_probs = model(batch['image'])
    return cross_entropy(log_probs, batch['label']), log_probs
  (_, log_probs), grad = jax.value_and_grad(loss_fn, has_aux=True)(
      optimizer.target)
  return optimizer.apply_gradient(grad), compute_metrics(log_probs,
                                                         batch['label'])


@jax.jit
def eval_step(model, batch):
  return compute_metrics(model(batch['image']), batch['label'])


def train_epoch(optimizer, train_ds, batch_size, epoch, rng):
  steps = len(train_ds['image']) // batch_size
  perms = random.permutation(rng, len(train_ds['image']))
  perms = perms[:steps * batch_size].reshape((steps, batch_size))
  batch_metrics = []
  for perm in perms:
    optimizer, metrics = train_step(
        optimizer, {k: v[perm] for k, v in train_ds.items()})
    batch_metrics.append(metrics)
  batch_metrics = jax.device_get(batch_metrics)
  means = {k: onp.mean([m[k] for m in batch_metrics])
           for k in batch_metrics[0]}
  logging.info('train epoch: %d, loss: %.4f, accuracy: %.2f', epoch,
               means['loss'], means['accuracy'] * 100)
  return optimizer, means


def eval_model(model, test_ds):
  summary = jax.tree_map(lambda x: x.item(),
                         jax.device_get(eval_step(model, test_ds)))
  return summary['loss'], summary['accuracy']


def get_datasets():
  builder = tfds.builder('mnist')
  builder.download_and_prepare()
  train_ds = tfds.as_numpy(builder.as_dataset(split='train', batch_size=-1))
  test_ds = tfds.as_numpy(builder.as_dataset(split='test', batch_size=-1))
  train_ds['image'] = jnp.float32(train_ds['image']) / 255.
  test_ds['image'] = jnp.float32(test_ds['image']) / 255.
  return train_ds, test_ds


def main(_):
  train_ds, test_ds = get_datasets()
  summary_writer = tensorboard.SummaryWriter(FLAGS.model_dir)
  rng, init_rng = random.split(random.PRNGKey(0))
  optimizer = optim.Momentum(learning_rate=FLAGS.learning_rate,
                             beta=FLAGS.momentum).create(
                                 create_model(init_rng))
  for epoch in range(1, FLAGS.num_epochs + 1):
    rng, input_rng = random.split(rng)
    optimizer, train_metrics = train_epoch(optimizer, train_ds,
                                           FLAGS.batch_size, epoch, input_rng)
    loss, accuracy = eval_model(optimizer.target, test_ds)
    logging.info('eval epoch: %d, loss: %.4f, accuracy: %.2f', epoch, loss,
                 accuracy * 100)
    summary_writer.scalar('train_loss', train_metrics['loss'], epoch)
    summary_writer.scalar('train_accuracy', train_metrics['accuracy'], epoch)
    summary_writer.scalar('eval_loss', loss, epoch)
    summary_writer.scalar('eval_accuracy', accuracy, epoch)
  summary_writer.flush()


if __name__ == '__main__':
  app.run(main)
