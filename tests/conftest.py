"""Shared fixtures: the conformance runs are made once per session."""

import os

import pytest

from tests import conformance
from tests import standalone_env

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


@pytest.fixture(scope='session')
def python_without_flaxlegacy(tmp_path_factory):
  """A python with jax, flax and optax where ``import flaxlegacy`` fails
  (tests/standalone_env.py); run it with ``standalone_env.env()``."""
  return standalone_env.make(tmp_path_factory.mktemp('standalone'))
