"""tests/parallel.py's scheduler: tests that share a module-scoped fixture,
or an ``xdist_group`` mark, run on one worker, so the fixture is built once
per run (pytest-xdist's own groups are lost under pytest 9)."""

import os
import subprocess
import sys
import textwrap

from tests import parallel

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _write(path, text):
  path.write_text(textwrap.dedent(text))
  return str(path)


def test_source_groups(tmp_path):
  fixture = _write(tmp_path / 'test_a.py', '''\
      import pytest

      @pytest.fixture(scope='module')
      def built():
        return 1

      @pytest.mark.xdist_group(name='pair')
      def test_one(built):
        pass
      ''')
  assert parallel.source_groups(fixture) == (fixture, {'test_one': 'pair'})
  marked = _write(tmp_path / 'test_b.py', '''\
      import pytest
      pytestmark = [pytest.mark.slow, pytest.mark.xdist_group('runs')]

      @pytest.fixture
      def cheap():
        return 1
      ''')
  assert parallel.source_groups(marked) == ('runs', {})
  plain = _write(tmp_path / 'test_c.py', '''\
      import pytest

      @pytest.fixture(scope='function')
      def cheap():
        return 1
      ''')
  assert parallel.source_groups(plain) == (None, {})


def test_module_fixture_is_built_once_on_two_workers(tmp_path):
  log = tmp_path / 'built.txt'
  (tmp_path / 'conftest.py').write_text(textwrap.dedent('''\
      from tests import parallel

      def pytest_xdist_make_scheduler(config, log):
        return parallel.make_scheduler(config, log)
      '''))
  _write(tmp_path / 'test_shared.py', f'''\
      import os
      import time
      import pytest

      @pytest.fixture(scope='module')
      def built():
        with open({str(log)!r}, 'a') as f:
          f.write(os.environ['PYTEST_XDIST_WORKER'] + '\\n')

      @pytest.mark.parametrize('i', range(8))
      def test_uses(i, built):
        time.sleep(0.2)  # (long enough for both workers to ask for work)
      ''')
  _write(tmp_path / 'test_other.py', '''\
      import time
      import pytest

      @pytest.mark.parametrize('i', range(8))
      def test_alone(i):
        time.sleep(0.2)
      ''')
  env = dict(os.environ, PYTHONPATH=REPO, FLAXLEGACY_PYTEST='off')
  p = subprocess.run(
      [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
       '-n', '2', '--dist', 'loadgroup', '-c', os.devnull,
       '--rootdir', str(tmp_path), str(tmp_path)],
      cwd=str(tmp_path), env=env, capture_output=True, text=True,
      timeout=300)
  assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
  assert '16 passed' in p.stdout, p.stdout[-2000:]
  # one worker built it (without the scheduler: both did)
  assert len(log.read_text().split()) == 1, log.read_text()
