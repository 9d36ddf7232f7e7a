"""Shared fixtures: the conformance runs are made once per session."""

import os

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
