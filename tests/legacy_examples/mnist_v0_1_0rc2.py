"""Re-enacts examples/mnist/train.py of legacy Flax v0.1.0rc2."""
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
flags.DEFINE_float('learning_rate', 0.1, 'momentum optimizer learning rate')
flags.DEFINE_float('momentum', 0.9, 'momentum optimizer beta')
flags.DEFINE_integer('batch_size', 128, 'batch size')
flags.DEFINE_integer('num_epochs', 10, 'epochs')


def load_split(split):
  data = tfds.as_numpy(tfds.load('mnist', split=split, batch_size=-1))
  data['image'] = onp.float32(data['image']) / 255.
  return data


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


def create_optimizer(model, learning_rate, beta):
  return optim.Momentum(learning_rate=learning_rate, beta=beta).create(model)


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
  optimizer = optimizer.apply_gradient(grad)
  return optimizer, compute_metrics(log_probs, batch['label'])


@jax.jit
def eval_step(model, batch):
  return compute_metrics(model(batch['image']), batch['label'])


def train_epoch(optimizer, train_ds, batch_size, epoch, rng):
  steps = len(train_ds['image']) // batch_size
  perms = rng.permutation(len(train_ds['image']))[:steps * batch_size]
  batch_metrics = []
  for perm in perms.reshape((steps, batch_size)):
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


def main(_):
  train_ds = load_split(tfds.Split.TRAIN)
  test_ds = load_split(tfds.Split.TEST)
  optimizer = create_optimizer(create_model(random.PRNGKey(0)),
                               FLAGS.learning_rate, FLAGS.momentum)
  input_rng = onp.random.RandomState(0)
  for epoch in range(1, FLAGS.num_epochs + 1):
    optimizer, _ = train_epoch(optimizer, train_ds, FLAGS.batch_size, epoch,
                               input_rng)
    loss, accuracy = eval_model(optimizer.target, test_ds)
    logging.info('eval epoch: %d, loss: %.4f, accuracy: %.2f', epoch, loss,
                 accuracy * 100)


if __name__ == '__main__':
  app.run(main)
