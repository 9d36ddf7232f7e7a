"""Smoke test of checkpointing.diff (run by howtos/check_diffs.py).

A run stopped after epoch 1 and restarted for 2 epochs resumes from the saved
step, trains only epoch 2 and ends with the parameters of an uninterrupted
2-epoch run; one checkpoint file per epoch holds the optimizer of that epoch.
"""

import os
import re
import tempfile

import jax
import numpy as onp

from flax.training import checkpoints
import smoke_lib
import train

EPOCH = re.compile(r'epoch (\d+)  train loss: ')
RESUMED = re.compile(r'resumed from (\S+) at step (\d+): (\d+) of (\d+) epochs '
                     r'done$')
ARGS = ['--batch_size=32']


def epochs_logged(lines):
  return [int(EPOCH.match(l).group(1)) for l in lines if EPOCH.match(l)]


def assert_same(a, b, what):
  for x, y in zip(jax.tree_util.tree_leaves(jax.device_get(a)),
                  jax.tree_util.tree_leaves(jax.device_get(b))):
    onp.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7, err_msg=what)


def main():
  smoke_lib.cap_datasets(train)
  tests = smoke_lib.run_example_tests()
  steps_per_epoch = smoke_lib.MAX_TRAIN // 32
  with tempfile.TemporaryDirectory() as tmp:
    resumed_dir = os.path.join(tmp, 'resumed')
    (first, _), lines = smoke_lib.run_main(
        train, ARGS + ['--num_epochs=1', f'--model_dir={resumed_dir}'])
    assert epochs_logged(lines) == [1], lines
    assert not any(RESUMED.match(l) for l in lines), lines
    assert int(first.state.step) == steps_per_epoch

    (second, _), lines = smoke_lib.run_main(
        train, ARGS + ['--num_epochs=2', f'--model_dir={resumed_dir}'])
    resumed = [RESUMED.match(l).groups() for l in lines if RESUMED.match(l)]
    assert resumed == [(os.path.join(resumed_dir, 'checkpoint_1'),
                        str(steps_per_epoch), '1', '2')], lines
    assert epochs_logged(lines) == [2], lines
    assert int(second.state.step) == 2 * steps_per_epoch

    files = sorted(f for f in os.listdir(resumed_dir)
                   if f.startswith('checkpoint_'))
    assert files == ['checkpoint_1', 'checkpoint_2'], files
    saved = checkpoints.restore_checkpoint(resumed_dir, first, step=1)
    assert int(saved.state.step) == steps_per_epoch
    assert_same(saved, first, 'checkpoint_1 is not the epoch-1 optimizer')

    (straight, _), lines = smoke_lib.run_main(
        train, ARGS + ['--num_epochs=2', f'--model_dir={tmp}/straight'])
    assert epochs_logged(lines) == [1, 2], lines
    assert_same(second, straight,
                'the resumed run differs from the uninterrupted one')

  smoke_lib.report('checkpointing', example_tests=tests, checkpoints=files,
                   resumed_at_step=int(resumed[0][1]),
                   final_step=int(second.state.step))


if __name__ == '__main__':
  main()
