"""Shared fixtures: the conformance runs are made once per session."""

import os
import shutil
import sys
import tempfile

import pytest

from tests import conformance
from tests import parallel
from tests import standalone_env

collect_ignore = ['conformance.py']

_SLOW_LIST = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          'slow_tests.txt')


def _slow_ids():
  with open(_SLOW_LIST) as f:
    lines = (line.split('#', 1)[0].strip() for line in f)
    return [line for line in lines if line]


# -- one JAX compilation cache per test run --------------------------------
#
# Many tests run programs that compile the same XLA computations (the MNIST
# example's steps, the conformance generators, a legacy and an upgraded
# process of one model), each in a fresh process.  Every process of a run --
# the parallel workers and each subprocess whose environment is this one's --
# shares one persistent compilation cache, made empty at the start of the
# run and removed at its end, so a costly computation is compiled once per
# run.
# Nothing a test asserts changes: the Python code (flaxlegacy's included) is
# traced and lowered in every process as before; only XLA's compilation of a
# computation already compiled in this run is read back from disk (a cache
# key covers the computation, the compile options and the JAX version).
# With a size limit set, JAX locks the cache (the filelock package, in the
# test extra) so processes compiling at once do not read a half-written
# entry; with that limit JAX scans the whole cache at each write, so only
# compiles of 0.1 s or more are kept (eager code's op-by-op compiles, many
# thousands, made it quadratic: docs/decisions.md).  A
# JAX_COMPILATION_CACHE_DIR set by the caller is left alone;
# FLAXLEGACY_TEST_COMPILATION_CACHE=off runs without one.
_CACHE_ENV = {
    'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS': 0.1,
    'JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES': 0,
    'JAX_COMPILATION_CACHE_MAX_SIZE': 8 << 30,
}


def pytest_configure(config):
  if (os.environ.get('PYTEST_XDIST_WORKER')  # inherits the controller's
      or os.environ.get('JAX_COMPILATION_CACHE_DIR')
      or os.environ.get('FLAXLEGACY_TEST_COMPILATION_CACHE') == 'off'):
    return
  path = tempfile.mkdtemp(prefix='flaxlegacy-tests-jax-cache-')
  config.stash[_CACHE_KEY] = (path, {k: os.environ.get(k) for k in
                                     ['JAX_COMPILATION_CACHE_DIR',
                                      *_CACHE_ENV]})
  os.environ['JAX_COMPILATION_CACHE_DIR'] = path
  for k, v in _CACHE_ENV.items():
    os.environ.setdefault(k, str(v))
  if 'jax' in sys.modules:  # already read its environment (no workers: -n 0)
    jax = sys.modules['jax']
    jax.config.update('jax_compilation_cache_dir', path)
    for k in _CACHE_ENV:
      jax.config.update(k.lower(), type(_CACHE_ENV[k])(os.environ[k]))


def pytest_unconfigure(config):
  made = config.stash.get(_CACHE_KEY, None)
  if made is None:
    return
  path, before = made
  for k, v in before.items():
    if v is None:
      os.environ.pop(k, None)
    else:
      os.environ[k] = v
  shutil.rmtree(path, ignore_errors=True)


_CACHE_KEY = pytest.StashKey()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
  """Marks the tests listed in tests/slow_tests.txt as slow (before ``-m``
  deselects); a listed test whose file is collected but whose function does
  not exist there is an error, so the list cannot go stale."""
  del config
  wanted = _slow_ids()
  modules = {}
  for item in items:
    nodeid = item.nodeid
    base = nodeid.split('[', 1)[0]
    if nodeid in wanted or base in wanted:
      item.add_marker(pytest.mark.slow)
    module = getattr(item, 'module', None)
    if module is not None:
      modules.setdefault(nodeid.split('::', 1)[0], module)
  for entry in wanted:
    path, _, name = entry.partition('::')
    module = modules.get(path)
    if module is not None and not hasattr(module, name.split('[', 1)[0]):
      raise pytest.UsageError(
          f'tests/slow_tests.txt lists {entry}, which {path} does not define')


@pytest.fixture(scope='session')
def shared():
  path = conformance.shared_dir()
  if path is None:
    if os.environ.get('CI'):
      pytest.fail('shared/ (reference traces) not found beside the checkout; '
                  'set FLAXLEGACY_SHARED')
    pytest.skip('shared/ with the legacy reference traces is not available')
  return path


@pytest.fixture(scope='session')
def generated(shared, tmp_path_factory):  # pylint: disable=redefined-outer-name
  """generated(program) -> candidate dir with that program's traces.

  Each program is generated once per test run, whichever parallel worker
  asks first (tests/parallel.py); the others reuse its output.
  """
  del shared
  root = os.path.join(parallel.shared_root(tmp_path_factory), 'cand')

  def make(program):
    def run(folder):
      proc = conformance.generate(program, folder)
      return {'returncode': proc.returncode, 'stdout': proc.stdout[-3000:],
              'stderr': proc.stderr[-6000:]}
    return run

  def get(program):
    folder, run = parallel.once(root, program, make(program))
    if run['returncode'] != 0:
      pytest.fail(f'gen_{program}.py failed under flaxlegacy:\n'
                  f'{run["stdout"]}\n{run["stderr"]}')
    return folder

  return get


@pytest.fixture(scope='session')
def python_without_flaxlegacy(tmp_path_factory):
  """A python with jax, flax and optax where ``import flaxlegacy`` fails
  (tests/standalone_env.py), built once per run for every parallel worker;
  run it with ``standalone_env.env()``."""
  return standalone_env.make(os.path.join(
      parallel.shared_root(tmp_path_factory), 'standalone'))


def pytest_xdist_make_scheduler(config, log):
  """Tests that share an expensive fixture run on one worker
  (tests/parallel.py: pytest-xdist's own ``xdist_group`` is lost under
  pytest 9)."""
  if config.getvalue('dist') in ('load', 'loadgroup', 'loadscope'):
    return parallel.make_scheduler(config, log)
  return None
