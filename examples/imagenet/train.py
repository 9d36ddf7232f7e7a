"""Trains a ResNet on ImageNet with data parallelism, written in legacy Flax.

The 2020 recipe as legacy Flax examples wrote it: a ``flax.nn`` ResNet whose
BatchNorm statistics live in ``nn.stateful`` (averaged across devices with
``axis_name='batch'``), ``optim.Momentum(nesterov=True)`` with the learning
rate of a ``flax.training.lr_schedule`` schedule passed to
``apply_gradient(grad, learning_rate=lr)``, ``jax.pmap`` over all local
devices (``jax_utils.replicate``, ``common_utils.shard``,
``jax_utils.prefetch_to_device``), a checkpoint after every epoch
(``flax.training.checkpoints``, resumed on restart), TensorBoard summaries
(``flax.metrics.tensorboard``) and a half-precision option (bfloat16 on TPU
and CPU, float16 with ``optim.DynamicScale`` on GPU).

Data: TFDS ``imagenet2012`` (prepared by the user: it needs a manual
download), or ``--synthetic_data`` for benchmarks and offline runs.
"""

import functools
import time

from absl import app
from absl import flags
from absl import logging

import flax
from flax import jax_utils
from flax import nn
from flax import optim
from flax.metrics import tensorboard
from flax.training import checkpoints
from flax.training import common_utils
from flax.training import lr_schedule

import jax
from jax import lax
from jax import random
import jax.numpy as jnp

import numpy as onp

import input_pipeline
import models


FLAGS = flags.FLAGS

flags.DEFINE_float('learning_rate', 0.1,
                   'Learning rate for a global batch of 256 (scaled '
                   'linearly with --batch_size).')
flags.DEFINE_float('momentum', 0.9, 'Nesterov momentum.')
flags.DEFINE_float('weight_decay', 1e-4, 'L2 penalty on conv/dense kernels.')
flags.DEFINE_integer('batch_size', 128, 'Global batch size.')
flags.DEFINE_integer('num_epochs', 90, 'Number of training epochs.')
flags.DEFINE_float('warmup_epochs', 5., 'Linear learning-rate warmup.')
flags.DEFINE_integer('num_layers', 50, 'ResNet depth: 10, 18, 34, 50, 101, '
                     '152 or 200.')
flags.DEFINE_integer('num_filters', 64, 'Filters of the first stage.')
flags.DEFINE_integer('image_size', input_pipeline.IMAGE_SIZE, 'Image side.')
flags.DEFINE_integer('num_classes', input_pipeline.NUM_CLASSES, 'Classes.')
flags.DEFINE_string('model_dir', None,
                    'Checkpoints and TensorBoard summaries; a run resumes '
                    'from the newest checkpoint there.')
flags.DEFINE_bool('half_precision', False,
                  'bfloat16 on TPU/CPU, float16 with dynamic loss scaling on '
                  'GPU.')
flags.DEFINE_bool('cache', False, 'Cache the dataset in memory.')
flags.DEFINE_string('data_dir', None, 'TFDS data dir of imagenet2012.')
flags.DEFINE_bool('synthetic_data', False,
                  'Train on a few fixed random batches (benchmarks, offline).')
flags.DEFINE_integer('steps_per_epoch', -1,
                     'Steps per epoch (default: train images // batch).')
flags.DEFINE_integer('steps_per_eval', -1,
                     'Eval steps (default: eval images // batch).')


@functools.lru_cache(maxsize=None)
def resnet(num_classes, num_layers, num_filters, dtype):
  """``models.ResNet.partial(...)``, one class per configuration."""
  # A Model's pytree structure includes its module class, and each
  # ``partial`` makes a new class: reusing it lets jitted steps compiled for
  # one model serve another of the same configuration (resumed runs, tests).
  return models.ResNet.partial(num_classes=num_classes, num_layers=num_layers,
                               num_filters=num_filters, dtype=dtype)


@functools.lru_cache(maxsize=None)
def momentum_optimizer(beta):
  """``optim.Momentum(beta=beta, nesterov=True)``, one per ``beta``."""
  # Likewise: an Optimizer's structure includes its OptimizerDef, which
  # compares by identity (as in legacy Flax).
  return optim.Momentum(beta=beta, nesterov=True)


def create_model(key, batch_size, image_size, dtype, num_layers, num_filters,
                 num_classes):
  """A ResNet ``nn.Model`` and its initial ``nn.Collection`` of BatchNorm stats."""
  module = resnet(num_classes, num_layers, num_filters, dtype)
  with nn.stateful() as init_state:
    _, params = module.init_by_shape(
        key, [((batch_size, image_size, image_size, 3), dtype)])
  return nn.Model(module, params), init_state


def cross_entropy_loss(log_probs, labels):
  one_hot = common_utils.onehot(labels, num_classes=log_probs.shape[-1])
  return -jnp.sum(one_hot * log_probs) / labels.size


def compute_metrics(log_probs, labels):
  metrics = {
      'loss': cross_entropy_loss(log_probs, labels),
      'accuracy': jnp.mean(jnp.argmax(log_probs, -1) == labels),
  }
  return lax.pmean(metrics, axis_name='batch')


def create_learning_rate_fn(base_learning_rate, steps_per_epoch, num_epochs,
                            warmup_epochs):
  return lr_schedule.create_cosine_learning_rate_schedule(
      base_learning_rate, steps_per_epoch, num_epochs,
      warmup_length=warmup_epochs)


@flax.struct.dataclass
class TrainState:
  step: int
  optimizer: optim.Optimizer
  model_state: nn.Collection
  dynamic_scale: optim.DynamicScale


def train_step(state, batch, learning_rate_fn, weight_decay):
  """One data-parallel step (run under ``jax.pmap(axis_name='batch')``)."""

  def loss_fn(model):
    with nn.stateful(state.model_state) as new_model_state:
      log_probs = model(batch['image'], axis_name='batch')
    loss = cross_entropy_loss(log_probs, batch['label'])
    kernels = [p for p in jax.tree_leaves(model.params) if p.ndim > 1]
    loss += weight_decay * 0.5 * sum(jnp.sum(p ** 2) for p in kernels)
    return loss, (new_model_state, log_probs)

  step = state.step
  optimizer = state.optimizer
  dynamic_scale = state.dynamic_scale
  lr = learning_rate_fn(step)
  if dynamic_scale:
    # Averages the gradients across devices itself.
    dynamic_scale, is_finite, aux, grad = dynamic_scale.value_and_grad(
        loss_fn, has_aux=True, axis_name='batch')(optimizer.target)
  else:
    aux, grad = jax.value_and_grad(loss_fn, has_aux=True)(optimizer.target)
    grad = lax.pmean(grad, axis_name='batch')
  new_model_state, log_probs = aux[1]
  new_optimizer = optimizer.apply_gradient(grad, learning_rate=lr)
  metrics = compute_metrics(log_probs, batch['label'])
  metrics['learning_rate'] = lr
  if dynamic_scale:
    # Skip the update where the scaled gradients overflowed.
    new_optimizer = jax.tree_multimap(
        functools.partial(jnp.where, is_finite), new_optimizer, optimizer)
    metrics['scale'] = dynamic_scale.scale
  new_state = state.replace(step=step + 1, optimizer=new_optimizer,
                            model_state=new_model_state,
                            dynamic_scale=dynamic_scale)
  return new_state, metrics


def eval_step(state, batch):
  with nn.stateful(state.model_state, mutable=False):
    log_probs = state.optimizer.target(batch['image'], train=False)
  return compute_metrics(log_probs, batch['label'])


@functools.lru_cache(maxsize=None)
def pmapped_steps(base_learning_rate, steps_per_epoch, num_epochs,
                  warmup_epochs, weight_decay):
  """The pmapped train and eval steps, made once per configuration."""
  # Cached so that runs in one process (a resumed run, the tests) reuse the
  # compiled steps instead of compiling again.
  learning_rate_fn = create_learning_rate_fn(
      base_learning_rate, steps_per_epoch, num_epochs, warmup_epochs)
  p_train_step = jax.pmap(
      functools.partial(train_step, learning_rate_fn=learning_rate_fn,
                        weight_decay=weight_decay),
      axis_name='batch')
  p_eval_step = jax.pmap(eval_step, axis_name='batch')
  return p_train_step, p_eval_step


def prepare_tf_data(xs):
  """tf batch -> NumPy arrays with a leading local-device axis."""
  local_devices = jax.local_device_count()

  def prepare(x):
    x = x._numpy()  # pylint: disable=protected-access  (zero-copy)
    return x.reshape((local_devices, -1) + x.shape[1:])

  return jax.tree_map(prepare, xs)


def create_input_iter(batch_size, train, model_dtype, step_offset=0):
  """Sharded batches for ``jax.pmap``, prefetched onto the devices."""
  if FLAGS.synthetic_data:
    # Resumed runs continue the sequence where the checkpoint left it.
    it = input_pipeline.synthetic_batches(
        batch_size, FLAGS.image_size, dtype=model_dtype,
        num_classes=FLAGS.num_classes, seed=0 if train else 1,
        start=step_offset)
    it = map(common_utils.shard, it)
  else:
    import tensorflow.compat.v2 as tf  # pylint: disable=g-import-not-at-top
    input_dtype = {jnp.float32: tf.float32, jnp.bfloat16: tf.bfloat16,
                   jnp.float16: tf.float16}[model_dtype]
    ds = input_pipeline.create_split(
        batch_size, train, dtype=input_dtype, image_size=FLAGS.image_size,
        cache=FLAGS.cache, data_dir=FLAGS.data_dir)
    it = map(prepare_tf_data, ds)
  return jax_utils.prefetch_to_device(it, 2)


def restore_checkpoint(state, model_dir):
  return checkpoints.restore_checkpoint(model_dir, state)


def save_checkpoint(state, model_dir):
  if jax.process_index() == 0:
    state = jax.device_get(jax_utils.unreplicate(state))
    checkpoints.save_checkpoint(model_dir, state, int(state.step), keep=3)


# Made once: today's pmap compiles per mesh axis name of its inputs, so the
# same name as the train step's ('batch') keeps the step from recompiling.
_average_across_devices = jax.pmap(lambda x: lax.pmean(x, 'batch'), 'batch')


def sync_batch_stats(state):
  """Averages the BatchNorm running statistics across devices."""
  # With axis_name='batch' they already agree; averaging keeps them exact
  # regardless of reduction order before they are evaluated or saved.
  return state.replace(model_state=_average_across_devices(state.model_state))


def model_dtype_for(platform, half_precision):
  """``(model dtype, needs dynamic loss scaling)``."""
  if not half_precision:
    return jnp.float32, False
  if platform == 'gpu':
    return jnp.float16, True
  return jnp.bfloat16, False


def train_and_evaluate(model_dir):
  """Trains for FLAGS.num_epochs (resuming in model_dir); returns the state."""
  batch_size = FLAGS.batch_size
  if batch_size % jax.device_count():
    raise ValueError(f'--batch_size={batch_size} must be divisible by the '
                     f'number of devices ({jax.device_count()})')
  if not FLAGS.synthetic_data and (
      FLAGS.num_classes != input_pipeline.NUM_CLASSES):
    raise ValueError(
        f'--num_classes={FLAGS.num_classes}, but {input_pipeline.DATASET} '
        f'has {input_pipeline.NUM_CLASSES} classes (labels outside the '
        'model\'s classes would silently count as zero loss)')
  local_batch_size = batch_size // jax.process_count()
  dtype, loss_scaling = model_dtype_for(jax.local_devices()[0].platform,
                                        FLAGS.half_precision)
  steps_per_epoch = (FLAGS.steps_per_epoch if FLAGS.steps_per_epoch > 0 else
                     input_pipeline.TRAIN_IMAGES // batch_size)
  steps_per_eval = (FLAGS.steps_per_eval if FLAGS.steps_per_eval > 0 else
                    input_pipeline.EVAL_IMAGES // batch_size)
  num_steps = steps_per_epoch * FLAGS.num_epochs

  summary_writer = None
  if model_dir and jax.process_index() == 0:
    summary_writer = tensorboard.SummaryWriter(model_dir)

  model, model_state = create_model(
      random.PRNGKey(0), batch_size // jax.device_count(), FLAGS.image_size,
      dtype, FLAGS.num_layers, FLAGS.num_filters, FLAGS.num_classes)
  optimizer = momentum_optimizer(FLAGS.momentum).create(model)
  state = TrainState(step=0, optimizer=optimizer, model_state=model_state,
                     dynamic_scale=optim.DynamicScale() if loss_scaling
                     else None)
  del model, model_state, optimizer
  if model_dir:
    state = restore_checkpoint(state, model_dir)
  step_offset = int(state.step)  # > 0 when resuming
  if step_offset:
    logging.info('resuming from the checkpoint of step %d', step_offset)
  state = jax_utils.replicate(state)

  p_train_step, p_eval_step = pmapped_steps(
      FLAGS.learning_rate * batch_size / 256., steps_per_epoch,
      FLAGS.num_epochs, FLAGS.warmup_epochs, FLAGS.weight_decay)

  train_iter = create_input_iter(local_batch_size, True, dtype, step_offset)
  eval_iter = create_input_iter(local_batch_size, False, dtype)

  train_metrics = []
  epoch_start = time.time()
  for step, batch in zip(range(step_offset, num_steps), train_iter):
    state, metrics = p_train_step(state, batch)
    train_metrics.append(metrics)
    if (step + 1) % steps_per_epoch:
      continue
    epoch = (step + 1) // steps_per_epoch
    train_metrics = common_utils.get_metrics(train_metrics)
    summary = jax.tree_map(lambda x: x.mean(), train_metrics)
    steps_per_sec = len(train_metrics['loss']) / (time.time() - epoch_start)
    logging.info('train epoch: %d, loss: %.4f, accuracy: %.2f, lr: %.4f, '
                 'steps/s: %.2f', epoch, summary['loss'],
                 summary['accuracy'] * 100, summary['learning_rate'],
                 steps_per_sec)
    state = sync_batch_stats(state)
    eval_metrics = common_utils.get_metrics(
        [p_eval_step(state, next(eval_iter)) for _ in range(steps_per_eval)])
    eval_summary = jax.tree_map(lambda x: x.mean(), eval_metrics)
    logging.info('eval epoch: %d, loss: %.4f, accuracy: %.2f', epoch,
                 eval_summary['loss'], eval_summary['accuracy'] * 100)
    if summary_writer is not None:
      for key, values in train_metrics.items():
        for i, value in enumerate(values):
          summary_writer.scalar(f'train_{key}', value,
                                step + 1 - len(values) + i)
      summary_writer.scalar('steps_per_second', steps_per_sec, step + 1)
      for key, value in eval_summary.items():
        summary_writer.scalar(f'eval_{key}', value, step + 1)
      summary_writer.flush()
    if model_dir:
      save_checkpoint(state, model_dir)
    train_metrics = []
    epoch_start = time.time()

  # Let queued device work finish before the caller reads the state.
  jax.random.normal(jax.random.PRNGKey(0), ()).block_until_ready()
  return state


def main(argv):
  if len(argv) > 1:
    raise app.UsageError('Too many command-line arguments.')
  if not FLAGS.synthetic_data:
    import tensorflow.compat.v2 as tf  # pylint: disable=g-import-not-at-top
    # The input pipeline must not take GPU memory away from JAX.
    tf.config.experimental.set_visible_devices([], 'GPU')
  train_and_evaluate(FLAGS.model_dir)


if __name__ == '__main__':
  app.run(main)
