"""The ImageNet example's own tests, on 8 CPU devices, in one subprocess.

examples/imagenet/train_test.py trains a small ResNet for a few steps with
jax.pmap over 8 host devices (synthetic data and TFDS imagenet2012 mocked by
tfds.testing.mock_data), checks finite parameters, moving and
replica-identical batch statistics, per-epoch checkpoints that restore, and a
resumed run that ends exactly where an uninterrupted one did.

Compiling dominates (the tests' own steps take milliseconds), so XLA's
backend optimisations are off (``--xla_backend_optimization_level=0``:
compiling takes about half as long).  The flag changes float rounding (a
few steps of the MNIST CNN differ by ~1e-5 with and without it), which
nothing here depends on: the tests compare runs of one process with each
other, never with numbers made elsewhere.
"""

import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, 'examples', 'imagenet')


def _env(tmp_path):
  env = dict(os.environ, JAX_PLATFORMS='cpu', TF_CPP_MIN_LOG_LEVEL='2',
             XLA_FLAGS='--xla_force_host_platform_device_count=8 '
             '--xla_backend_optimization_level=0',
             HOME=str(tmp_path), FLAXLEGACY_OFFLINE='1')
  env['PYTHONPATH'] = REPO + os.pathsep + env.get('PYTHONPATH', '')
  return env


def test_cheap_cases_of_the_example_tests(tmp_path):
  """The fast lane's share: the example's tests that build nothing large
  (an unsupported depth named in the error, the host split of the dataset,
  the synthetic batches' cycle, 8 devices), run by the file itself."""
  cases = ['ModelTest.test_bad_depth', 'TrainTest.test_eight_devices',
           'InputPipelineTest.test_host_split',
           'InputPipelineTest.test_synthetic_batches_cycle']
  run = subprocess.run([sys.executable, 'train_test.py', *cases],
                       cwd=EXAMPLE, env=_env(tmp_path), capture_output=True,
                       text=True, timeout=600)
  out = run.stdout + run.stderr
  assert run.returncode == 0, out[-6000:]
  assert re.search(r'Ran 4 tests in [\d.]+s\n\nOK', out), out[-3000:]


@pytest.mark.slow
def test_imagenet_train_test_on_8_cpu_devices(tmp_path):
  run = subprocess.run([sys.executable, 'train_test.py'], cwd=EXAMPLE,
                       env=_env(tmp_path), capture_output=True, text=True,
                       timeout=1200)
  out = run.stdout + run.stderr
  assert run.returncode == 0, out[-6000:]
  assert re.search(r'Ran 13 tests in [\d.]+s\n\nOK', out), out[-3000:]
  # The resumed run logged its restart, and epochs were logged per epoch.
  assert 'resuming from the checkpoint of step 2' in out
  assert re.search(r'train epoch: 2, loss: [\d.]+, accuracy: ', out)
