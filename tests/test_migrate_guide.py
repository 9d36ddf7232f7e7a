"""docs/migration.md: every step of the MNIST walk-through runs and, started
from the same initial parameters, trains to the numbers of the legacy
example (examples/mnist/train.py).  Small synthetic data stand in for MNIST.
"""

import importlib.util
import os
import subprocess
import sys

from absl import flags
from absl.testing import flagsaver
import jax
from jax import random
import numpy as np
import pytest

import flaxlegacy

flaxlegacy.activate()

from flax.training import checkpoints  # noqa: E402

from flaxlegacy import cli  # noqa: E402
from flaxlegacy import migrate  # noqa: E402
from tests import conformance  # noqa: E402

GUIDE = os.path.join(conformance.REPO, 'docs', 'migration')
EXAMPLE = os.path.join(conformance.REPO, 'examples', 'mnist', 'train.py')
CONFIG = dict(learning_rate=0.1, momentum=0.9, batch_size=32, num_epochs=1,
              seed=0)


def load(path, name):
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@pytest.fixture(scope='module')
def data():
  r = np.random.RandomState(0)
  templates = r.uniform(0, 1, (10, 28, 28, 1))

  def split(n):
    labels = r.randint(0, 10, n).astype(np.int64)
    images = 0.6 * templates[labels] + 0.4 * r.uniform(0, 1, (n, 28, 28, 1))
    return {'image': images.astype(np.float32), 'label': labels}
  return split(160), split(64)


@pytest.fixture(scope='module')
def legacy_run(data):
  """Step 0: the legacy example itself, one epoch."""
  example = load(EXAMPLE, 'mnist_legacy_example')
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()
  with flagsaver.flagsaver(**CONFIG):
    optimizer, accuracy = example.train(*data)
  init_rng = random.split(random.PRNGKey(CONFIG['seed']))[1]
  initial = example.create_model(init_rng).params
  return example, optimizer, accuracy, initial


@pytest.fixture(scope='module')
def steps():
  return {name: load(os.path.join(GUIDE, name + '.py'), 'guide_' + name)
          for name in ('step1_train_state', 'step2_legacy_in_linen',
                       'step3_linen')}


def assert_close(a, b, rtol):
  for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a),
                          jax.tree_util.tree_leaves(b)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol,
                               atol=1e-7, err_msg=jax.tree_util.keystr(path))


def test_step1_train_state_same_numbers(data, legacy_run, steps):
  _, optimizer, accuracy, _ = legacy_run
  state, acc = steps['step1_train_state'].train(*data, **CONFIG)
  assert int(state.step) == int(optimizer.state.step) == 5
  # The same arithmetic: bit-identical.
  assert_close(state.params, optimizer.target.params, rtol=0)
  assert acc == accuracy


def test_step2_legacy_trunk_in_linen_same_numbers(data, legacy_run, steps):
  _, optimizer, _, initial = legacy_run
  step2 = steps['step2_legacy_in_linen']
  state = step2.create_train_state(None, 0.1, 0.9,
                                   step2.params_from_legacy(initial))
  state, _ = step2.train(*data, state=state, **CONFIG)
  assert_close(state.params, step2.params_from_legacy(
      optimizer.target.params), rtol=1e-5)


def test_step3_linen_same_numbers(data, legacy_run, steps):
  _, optimizer, _, initial = legacy_run
  step3 = steps['step3_linen']
  state = step3.create_train_state(None, 0.1, 0.9,
                                   migrate.linen_params(initial))
  state, _ = step3.train(*data, state=state, **CONFIG)
  assert_close(state.params, migrate.linen_params(optimizer.target.params),
               rtol=1e-5)


def test_step3_continues_a_converted_legacy_checkpoint(data, legacy_run,
                                                       steps, tmp_path):
  example, optimizer, _, _ = legacy_run
  legacy_dir, workdir = tmp_path / 'legacy', tmp_path / 'work'
  # What the legacy program would have written.
  checkpoints.save_checkpoint(str(legacy_dir), optimizer,
                              int(optimizer.state.step))
  assert cli.main(['convert', str(legacy_dir), str(workdir), '--optimizer',
                   'Momentum', '--hparam', 'beta=0.9']) == 0
  step3 = steps['step3_linen']
  # One more step each way, on the same batch.
  batch = {k: v[:32] for k, v in data[0].items()}
  legacy_next, _ = example.train_step(optimizer, batch)
  state = checkpoints.restore_checkpoint(
      str(workdir), step3.create_train_state(random.PRNGKey(1), 0.1, 0.9))
  assert int(state.step) == 5
  state, _ = step3.train_step(state, batch)
  assert_close(state.params, migrate.linen_params(
      legacy_next.target.params), rtol=1e-5)
  # And the program itself picks it up from --workdir.
  state, _ = step3.train(*data, workdir=str(workdir), **CONFIG)
  assert int(state.step) == 10


def test_step_program_starts():
  """A step is a program: it imports and parses its flags as a script.

  The three steps share this wiring (mnist_common.run); their modules are
  executed and trained above, so one subprocess suffices (absl's --help
  exits with status 1).
  """
  proc = subprocess.run(
      [sys.executable, os.path.join(GUIDE, 'step3_linen.py'), '--helpfull'],
      capture_output=True, text=True, timeout=300,
      env=dict(os.environ, JAX_PLATFORMS='cpu'))
  assert 'Traceback' not in proc.stderr, proc.stderr[-3000:]
  assert proc.returncode == 1
  assert '--workdir' in proc.stdout and '--num_epochs' in proc.stdout
