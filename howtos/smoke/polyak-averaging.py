"""Smoke test of polyak-averaging.diff (run by howtos/check_diffs.py).

The averaged parameters must come back from training, differ from both the
trained and the initial parameters, and be evaluated and logged every epoch
next to the trained model's metrics.
"""

import re

import jax
from jax import random
import numpy as onp

import smoke_lib
import train

EPOCH = re.compile(
    r'epoch (\d+)  train loss: [\d.]+, accuracy: [\d.]+  \|  '
    r'test loss: ([\d.]+), accuracy: ([\d.]+)  \|  '
    r'EMA test loss: ([\d.]+), accuracy: ([\d.]+)$')


def max_abs_diff(a, b):
  return max(float(onp.max(onp.abs(x - y))) for x, y in zip(
      jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


def main():
  smoke_lib.cap_datasets(train)
  tests = smoke_lib.run_example_tests()
  (optimizer, model_ema, accuracy), lines = smoke_lib.run_main(
      train, ['--num_epochs=2', '--ema_decay=0.9', '--batch_size=32'])

  epochs = [EPOCH.match(l) for l in lines if EPOCH.match(l)]
  assert [int(m.group(1)) for m in epochs] == [1, 2], (
      'expected one line with the trained and the EMA metrics per epoch:\n'
      + '\n'.join(lines))
  raw_loss, raw_acc, ema_loss, ema_acc = (float(x) for x in epochs[-1].groups()[1:])
  assert abs(raw_acc - accuracy * 100) < 0.006, (raw_acc, accuracy)

  # What was logged as EMA is the model train() returned as EMA.
  _, test_ds = train.get_datasets()
  loss, acc = train.eval_model(model_ema, test_ds)
  assert (round(loss, 4), round(acc * 100, 2)) == (ema_loss, ema_acc), (
      loss, acc, ema_loss, ema_acc)

  _, init_rng = random.split(random.PRNGKey(0))
  initial = train.create_model(init_rng).params
  to_trained = max_abs_diff(model_ema.params, optimizer.target.params)
  to_initial = max_abs_diff(model_ema.params, initial)
  assert to_trained > 1e-4 and to_initial > 1e-4, (to_trained, to_initial)
  assert jax.tree_util.tree_structure(model_ema.params) == (
      jax.tree_util.tree_structure(optimizer.target.params))

  smoke_lib.report('polyak-averaging', example_tests=tests,
                   epochs_logged=len(epochs), raw_loss=raw_loss,
                   ema_loss=ema_loss, raw_accuracy=raw_acc,
                   ema_accuracy=ema_acc, ema_to_trained=to_trained,
                   ema_to_initial=to_initial)


if __name__ == '__main__':
  main()
