"""Tests for examples/mnist/train.py, in the legacy examples' absltest style.

Needs TFDS ``mnist`` prepared (``flaxlegacy data mnist``); run with
``python examples/mnist/train_test.py``.
"""

from absl.testing import absltest
from absl.testing import flagsaver

from flax import nn
import jax
from jax import random
import jax.numpy as jnp
import numpy as onp

import train

# Parse absl flags (test_srcdir, test_tmpdir) as the legacy tests did.
jax.config.parse_flags_with_absl()


class TrainTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.train_ds, cls.test_ds = train.get_datasets()

  def test_model_parameters(self):
    model = train.create_model(random.PRNGKey(0))
    shapes = jax.tree_util.tree_map(onp.shape, model.params)
    self.assertEqual(shapes, {
        'Conv_0': {'kernel': (3, 3, 1, 32), 'bias': (32,)},
        'Conv_1': {'kernel': (3, 3, 32, 64), 'bias': (64,)},
        'Dense_2': {'kernel': (7 * 7 * 64, 256), 'bias': (256,)},
        'Dense_3': {'kernel': (256, 10), 'bias': (10,)},
    })
    self.assertIsInstance(model, nn.Model)

  def test_train_step_lowers_the_loss(self):
    optimizer = train.create_optimizer(
        train.create_model(random.PRNGKey(0)), 0.1, 0.9)
    batch = {k: v[:64] for k, v in self.train_ds.items()}
    losses = []
    for _ in range(3):
      optimizer, metrics = train.train_step(optimizer, batch)
      losses.append(float(metrics['loss']))
    self.assertTrue(onp.all(onp.isfinite(losses)))
    # A randomly initialised 10-way classifier starts near log(10).
    self.assertAlmostEqual(losses[0], onp.log(10), delta=0.5)
    self.assertLess(losses[-1], losses[0])
    self.assertEqual(int(optimizer.state.step), 3)

  def test_eval_model(self):
    model = train.create_model(random.PRNGKey(0))
    loss, accuracy = train.eval_model(model, self.test_ds)
    self.assertGreater(loss, 1.5)
    self.assertBetween(accuracy, 0.0, 0.4)  # untrained: about chance

  @flagsaver.flagsaver(num_epochs=1, batch_size=32)
  def test_one_epoch_learns(self):
    optimizer, accuracy = train.train(self.train_ds, self.test_ds)
    self.assertGreater(accuracy, 0.5)
    self.assertEqual(int(optimizer.state.step),
                     len(self.train_ds['image']) // 32)

  @flagsaver.flagsaver(batch_size=10**6)
  def test_batch_larger_than_train_set(self):
    with self.assertRaisesRegex(ValueError, 'is larger than the train set'):
      train.train(self.train_ds, self.test_ds)


if __name__ == '__main__':
  absltest.main()
