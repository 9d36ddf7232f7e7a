"""Shared fixtures: the conformance runs are made once per session."""

import os

import pytest

from tests import conformance

collect_ignore = ['conformance.py']


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
  """generated(program) -> candidate dir with that program's traces."""
  del shared
  root = tmp_path_factory.mktemp('cand')
  runs = {}

  def get(program):
    if program not in runs:
      runs[program] = conformance.generate(program, str(root))
    run = runs[program]
    if run.returncode != 0:
      pytest.fail(f'gen_{program}.py failed under flaxlegacy:\n'
                  f'{run.stdout[-3000:]}\n{run.stderr[-6000:]}')
    return str(root)

  return get
