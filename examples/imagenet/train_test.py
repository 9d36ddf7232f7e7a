"""Tests for the ImageNet example on 8 CPU devices, with a small ResNet.

Run as ``python examples/imagenet/train_test.py``; it asks XLA for 8 host
devices before JAX starts (unless XLA_FLAGS is already set).
"""

import os

if 'XLA_FLAGS' not in os.environ:
  os.environ['XLA_FLAGS'] = '--xla_force_host_platform_device_count=8'
os.environ.setdefault('JAX_PLATFORMS', 'cpu')

# pylint: disable=g-import-not-at-top,wrong-import-position
import functools
import tempfile

from absl.testing import absltest
from absl.testing import flagsaver

from flax import jax_utils
from flax import nn
from flax import optim
from flax.training import checkpoints
from flax.training import common_utils
import jax
from jax import random
import jax.numpy as jnp
import numpy as onp
import tensorflow_datasets as tfds

import input_pipeline
import models
import train

jax.config.parse_flags_with_absl()

# A ResNet-10 with 8 filters on 32x32 images: seconds, not hours.  All runs
# share one configuration, so they share one compiled train step.
SMALL = dict(num_layers=10, num_filters=8, image_size=32, batch_size=16,
             num_epochs=2, steps_per_epoch=2, steps_per_eval=1,
             warmup_epochs=0.5, synthetic_data=True)


def _leaves(tree):
  return [onp.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


class ModelTest(absltest.TestCase):

  def test_resnet50_shapes_and_state(self):
    model, state = train.create_model(random.PRNGKey(0), 2, 32, jnp.float32,
                                      50, 64, 1000)
    with nn.stateful(state) as new_state:
      y = model(random.normal(random.PRNGKey(1), (2, 32, 32, 3)))
    self.assertEqual(y.shape, (2, 1000))
    shapes = lambda c: jax.tree_util.tree_map(onp.shape, c.as_dict())
    self.assertEqual(shapes(state), shapes(new_state))
    self.assertEqual(model.params['init_conv']['kernel'].shape, (7, 7, 3, 64))
    # 16 bottleneck blocks; the last stage expands to 4 * 512 features.
    blocks = [k for k in model.params if k.startswith('BottleneckBlock_')]
    self.assertLen(blocks, 16)
    self.assertEqual(model.params['Dense_16']['kernel'].shape, (2048, 1000))

  def test_resnet18_uses_basic_blocks(self):
    model, _ = train.create_model(random.PRNGKey(0), 1, 32, jnp.float32, 18,
                                  8, 10)
    blocks = [k for k in model.params if k.startswith('BasicBlock_')]
    self.assertLen(blocks, 8)
    self.assertEqual(model.params['Dense_8']['kernel'].shape, (64, 10))

  def test_bad_depth(self):
    with self.assertRaisesRegex(ValueError, r'num_layers=19: choose one of'):
      train.create_model(random.PRNGKey(0), 1, 32, jnp.float32, 19, 8, 10)


class TrainTest(absltest.TestCase):

  def test_eight_devices(self):
    self.assertEqual(jax.local_device_count(), 8)

  @flagsaver.flagsaver(**SMALL)
  def test_train_checkpoint_and_resume(self):
    model_dir = tempfile.mkdtemp()
    _, init_state = train.create_model(random.PRNGKey(0), 2, 32, jnp.float32,
                                       10, 8, 1000)
    replicated = train.train_and_evaluate(model_dir)
    # Cross-device batch statistics: every replica holds the same averages.
    for leaf in _leaves(replicated.model_state.as_dict()):
      onp.testing.assert_allclose(leaf, onp.broadcast_to(leaf[:1], leaf.shape),
                                  rtol=1e-6)
    state = jax.device_get(jax_utils.unreplicate(replicated))
    self.assertEqual(int(state.step), 4)
    # Finite parameters; BatchNorm running statistics moved away from init.
    for leaf in _leaves(state.optimizer.target.params):
      self.assertTrue(onp.all(onp.isfinite(leaf)))
    before = _leaves(init_state.as_dict())
    after = _leaves(state.model_state.as_dict())
    self.assertTrue(any(not onp.allclose(a, b) for a, b in zip(before, after)))
    # One checkpoint per epoch, and it restores leaf for leaf.
    files = os.listdir(model_dir)
    self.assertContainsSubset({'checkpoint_2', 'checkpoint_4'}, files)
    self.assertLen([f for f in files if 'tfevents' in f], 1)
    restored = checkpoints.restore_checkpoint(model_dir, state)
    for a, b in zip(_leaves(restored), _leaves(state)):
      onp.testing.assert_array_equal(a, b)
    # Interrupted after epoch 1: the resumed run ends where the whole run did.
    os.remove(os.path.join(model_dir, 'checkpoint_4'))
    resumed = jax.device_get(jax_utils.unreplicate(
        train.train_and_evaluate(model_dir)))
    self.assertEqual(int(resumed.step), 4)
    for a, b in zip(_leaves(resumed), _leaves(state)):
      onp.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

  def test_float16_steps_with_dynamic_loss_scaling(self):
    # The GPU half-precision path (float16 + optim.DynamicScale), on CPU.
    model, model_state = train.create_model(random.PRNGKey(0), 1, 16,
                                            jnp.float16, 10, 4, 10)
    state = jax_utils.replicate(train.TrainState(
        step=0, optimizer=train.momentum_optimizer(0.9).create(model),
        model_state=model_state, dynamic_scale=optim.DynamicScale()))
    p_step = jax.pmap(functools.partial(
        train.train_step, learning_rate_fn=lambda step: 0.1,
        weight_decay=1e-4), axis_name='batch')
    rng = onp.random.RandomState(0)
    batch = common_utils.shard({
        'image': rng.normal(size=(8, 16, 16, 3)).astype(onp.float16),
        'label': onp.arange(8, dtype=onp.int32)})
    for _ in range(3):
      state, metrics = p_step(state, batch)
    state = jax.device_get(jax_utils.unreplicate(state))
    self.assertEqual(int(state.step), 3)
    # The scale starts at 2**16 and only halves (overflow) or stays.
    scale = float(metrics['scale'][0])
    self.assertIn(scale, [2.0 ** k for k in range(10, 17)])
    for leaf in _leaves(state.optimizer.target.params):
      self.assertEqual(leaf.dtype, onp.float32)  # params stay float32
      self.assertTrue(onp.all(onp.isfinite(leaf)))

  @flagsaver.flagsaver(batch_size=12)
  def test_batch_not_divisible(self):
    with self.assertRaisesRegex(ValueError, r'--batch_size=12 must be '
                                r'divisible by the number of devices \(8\)'):
      train.train_and_evaluate(None)

  @flagsaver.flagsaver(num_classes=10, synthetic_data=False)
  def test_num_classes_must_match_imagenet(self):
    with self.assertRaisesRegex(ValueError, r'--num_classes=10, but '
                                r'imagenet2012 has 1000 classes'):
      train.train_and_evaluate(None)


class InputPipelineTest(absltest.TestCase):

  def test_host_split(self):
    self.assertEqual(input_pipeline.host_split(True), 'train[0:1281167]')
    self.assertEqual(input_pipeline.host_split(False, 100),
                     'validation[0:100]')

  def test_train_and_eval_batches_from_mock_tfds(self):
    with tfds.testing.mock_data(num_examples=12):
      for is_train in (True, False):
        ds = input_pipeline.create_split(4, train=is_train, image_size=24)
        batches = list(tfds.as_numpy(ds.take(3)))
        self.assertLen(batches, 3)  # repeated: more batches than examples
        for batch in batches:
          self.assertEqual(batch['image'].shape, (4, 24, 24, 3))
          self.assertEqual(batch['image'].dtype, onp.float32)
          self.assertTrue(onp.all((batch['label'] >= 0) &
                                  (batch['label'] < 1000)))
          # Normalised: roughly zero-centred, unit-scaled pixels.
          self.assertLess(abs(float(batch['image'].mean())), 3.0)

  def test_half_precision_images(self):
    import tensorflow.compat.v2 as tf
    with tfds.testing.mock_data(num_examples=4):
      ds = input_pipeline.create_split(2, train=False, image_size=16,
                                       dtype=tf.bfloat16)
      batch = next(iter(ds))
    self.assertEqual(batch['image'].dtype, tf.bfloat16)

  @flagsaver.flagsaver(**dict(SMALL, synthetic_data=False))
  def test_training_reads_mock_imagenet(self):
    with tfds.testing.mock_data(num_examples=32):
      state = train.train_and_evaluate(None)
    state = jax.device_get(jax_utils.unreplicate(state))
    self.assertEqual(int(state.step), 4)
    for leaf in _leaves(state.optimizer.target.params):
      self.assertTrue(onp.all(onp.isfinite(leaf)))

  def test_synthetic_batches_cycle(self):
    it = input_pipeline.synthetic_batches(4, 8, num_classes=10, num_distinct=2)
    first, second, third = next(it), next(it), next(it)
    self.assertIs(first, third)
    self.assertFalse(onp.array_equal(first['image'], second['image']))
    self.assertEqual(first['image'].shape, (4, 8, 8, 3))


if __name__ == '__main__':
  absltest.main()
