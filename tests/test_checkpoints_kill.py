"""A process killed with SIGKILL while saving leaves a restorable checkpoint.

A child process runs a save loop and kills itself with SIGKILL at a chosen
point of one save (half-way through writing the temp file, after writing it
but before the rename, after the rename but before old files are pruned),
or the parent kills it at a random moment.  The parent then restores the
latest checkpoint, checks it is the last complete one, and resumes the loop.
Both ``flax.training.checkpoints`` (with flaxlegacy's checkpoints policy)
and ``flaxlegacy.training.checkpoints`` are tested.
"""

import os
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

import flaxlegacy

flaxlegacy.activate()

from flax.training import checkpoints as flax_checkpoints  # noqa: E402

from flaxlegacy.training import checkpoints as legacy_checkpoints  # noqa: E402
from tests import conformance  # noqa: E402

MODULES = {'flaxlegacy': legacy_checkpoints, 'flax': flax_checkpoints}

CHILD = r'''
import builtins
import os
import signal
import sys
import warnings

import numpy as np

import flaxlegacy
flaxlegacy.activate()
from flax.training import checkpoints as flax_checkpoints
from flaxlegacy.training import checkpoints as legacy_checkpoints

warnings.simplefilter('ignore')
module = {'flax': flax_checkpoints, 'flaxlegacy': legacy_checkpoints}[
    sys.argv[1]]
ckpt_dir, point = sys.argv[2], sys.argv[3]
kill_step, first, last, size = map(int, sys.argv[4:8])
armed = [False]


def die():
  os.kill(os.getpid(), signal.SIGKILL)


class HalfWriter:
  """Writes half of what it is given, then the process dies."""

  def __init__(self, f):
    self._f = f

  def write(self, data):
    self._f.write(bytes(data)[:len(data) // 2])
    self._f.flush()
    die()

  def __getattr__(self, name):
    return getattr(self._f, name)

  def __enter__(self):
    return self

  def __exit__(self, *args):
    return self._f.__exit__(*args)


def killing(real, wrap=None):
  """``real``, except that while armed the process dies (or ``wrap``s)."""
  def fn(*args, **kwargs):
    if armed[0]:
      if wrap is None:
        die()
      return wrap(real(*args, **kwargs), *args)
    return real(*args, **kwargs)
  return fn


def half_writer(f, path, mode='r', *unused):
  return HalfWriter(f) if 'w' in mode and str(path).endswith('tmp') else f


# Both layers are patched: flax.io (which uses TensorFlow's gfile when
# TensorFlow is installed) and the os functions / open used on local paths.
from flax import io as flax_io
if point == 'mid_write':
  builtins.open = killing(builtins.open, half_writer)
  flax_io.GFile = killing(flax_io.GFile, half_writer)
elif point == 'before_rename':
  os.rename = killing(os.rename)
  os.replace = killing(os.replace)
  flax_io.rename = killing(flax_io.rename)
elif point == 'before_prune':
  os.remove = killing(os.remove)
  flax_io.remove = killing(flax_io.remove)

for step in range(first, last + 1):
  armed[0] = step == kill_step
  target = {'step': np.int32(step),
            'w': np.full((size,), step, np.float32)}
  module.save_checkpoint(ckpt_dir, target, step, keep=2)
  print('saved', step, flush=True)
'''


def content(step, size):
  return {'step': np.int32(step), 'w': np.full((size,), step, np.float32)}


def child(tmp_path, module_name, point, kill_step, first, last, size):
  script = tmp_path / 'child.py'
  script.write_text(CHILD)
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  env['PYTHONPATH'] = conformance.REPO + os.pathsep + env.get('PYTHONPATH',
                                                              '')
  env.pop('FLAXLEGACY_CHECKPOINTS', None)
  env.pop('FLAX_USE_ORBAX_CHECKPOINTING', None)
  return [sys.executable, str(script), module_name, str(tmp_path / 'ckpt'),
          point, str(kill_step), str(first), str(last), str(size)], env


def restore(module, ckpt_dir, size):
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', DeprecationWarning)
    return module.restore_checkpoint(ckpt_dir, content(0, size))


def assert_holds(restored, step, size):
  assert int(restored['step']) == step
  np.testing.assert_array_equal(restored['w'], content(step, size)['w'])


def resume(module, ckpt_dir, first, last, size):
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', DeprecationWarning)
    for step in range(first, last + 1):
      module.save_checkpoint(ckpt_dir, content(step, size), step, keep=2)


# (kill point, the step whose checkpoint survives when step 4 is killed,
#  files left beside the temp file)
POINTS = [
    ('mid_write', 3, ['checkpoint_2', 'checkpoint_3']),
    ('before_rename', 3, ['checkpoint_2', 'checkpoint_3']),
    ('before_prune', 4, ['checkpoint_2', 'checkpoint_3', 'checkpoint_4']),
]


@pytest.mark.parametrize('module_name', sorted(MODULES))
@pytest.mark.parametrize('point,survivor,left', POINTS)
def test_sigkill_during_save(tmp_path, module_name, point, survivor, left):
  size = 4096
  cmd, env = child(tmp_path, module_name, point, kill_step=4, first=1,
                   last=6, size=size)
  proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                        timeout=300)
  assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
  assert proc.stdout.split() == ['saved', '1', 'saved', '2', 'saved', '3']
  ckpt_dir = tmp_path / 'ckpt'
  names = sorted(os.listdir(ckpt_dir))
  assert [n for n in names if n != 'checkpoint_tmp'] == left
  if point != 'before_prune':
    # The interrupted temp file is there, and is not a checkpoint.
    assert 'checkpoint_tmp' in names
  module = MODULES[module_name]
  for reader in MODULES.values():
    assert_holds(restore(reader, ckpt_dir, size), survivor, size)
  # The loop resumes where it died: the stale temp file is overwritten,
  # keep=2 prunes as usual.
  resume(module, ckpt_dir, survivor + 1, 6, size)
  assert sorted(os.listdir(ckpt_dir)) == ['checkpoint_5', 'checkpoint_6']
  assert_holds(restore(module, ckpt_dir, size), 6, size)


@pytest.mark.parametrize('module_name', sorted(MODULES))
def test_sigkill_at_random_moment(tmp_path, module_name):
  # A bigger target, so that a good share of the time is spent writing.
  size = 2_000_000
  cmd, env = child(tmp_path, module_name, 'none', kill_step=-1, first=1,
                   last=10_000, size=size)
  proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
  try:
    saved = []
    while len(saved) < 3:
      line = proc.stdout.readline()
      assert line, proc.stderr.read()[-3000:]
      saved.append(int(line.split()[1]))
    time.sleep(np.random.RandomState().uniform(0.0, 0.3))
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.wait()
  ckpt_dir = tmp_path / 'ckpt'
  steps = sorted(int(n.split('_')[1]) for n in os.listdir(ckpt_dir)
                 if n != 'checkpoint_tmp')
  assert steps[-1] >= saved[-1]
  assert_holds(restore(MODULES[module_name], ckpt_dir, size), steps[-1], size)
