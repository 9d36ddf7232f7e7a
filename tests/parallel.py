"""Work shared by the parallel test workers (pytest-xdist) of one run.

The suite runs in parallel (README's test command: ``-n auto --dist
loadgroup``).  Each worker is a process of its own with its own session
fixtures, so work that is expensive and the same for every worker (building
the wheel, generating the conformance traces) is done once per run, in a
folder every worker of the run shares, under a file lock: the first worker
to ask does it, the others wait and reuse it.
"""

import contextlib
import fcntl
import json
import os


@contextlib.contextmanager
def locked(path):
  """An exclusive lock on ``path`` (created if absent), across processes."""
  with open(path, 'a') as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(f, fcntl.LOCK_UN)


def shared_root(tmp_path_factory):
  """A folder all xdist workers of this run share (this run's only)."""
  base = tmp_path_factory.getbasetemp()
  return str(base.parent if os.environ.get('PYTEST_XDIST_WORKER') else base)


def once(root, key, make):
  """``make(folder)``'s JSON-able result, computed once per run.

  ``folder`` is ``root/key``, empty at first; the result is kept beside it,
  so every worker gets the same one (a failure included: ``make`` should
  return it rather than raise, for the callers to report).
  """
  folder = os.path.join(root, key)
  done = folder + '.json'
  os.makedirs(root, exist_ok=True)
  with locked(folder + '.lock'):
    if not os.path.exists(done):
      os.makedirs(folder, exist_ok=True)
      result = make(folder)
      with open(done + '.tmp', 'w') as f:
        json.dump(result, f)
      os.replace(done + '.tmp', done)
  with open(done) as f:
    return folder, json.load(f)
