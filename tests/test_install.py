"""flaxlegacy installed the way users install it: wheel, non-editable, fresh venv.

The rest of the suite runs against the editable checkout, whose finder
imports ``collections`` at start-up and so hid a start-up bug: under
``FLAXLEGACY=on`` every process of a regular install died in a circular
import of the standard library (``enum``, ``contextlib``, ``re``).  Here each
documented way of starting a legacy process runs in a virtualenv that holds
the built wheel and nothing of the checkout (``tests/installed.py``), from a
folder outside the checkout, with a user's environment.
"""

import glob
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from tests import installed

LEGACY_OUTPUT = "['Dense_0', 'Dense_1']"
# Legacy random.split(PRNGKey(0))[0] (the legacy PRNG policy is on).
LEGACY_SPLIT0 = '[4146024105  967050713]'

LEGACY_SCRIPT = '''
import jax
import jax.numpy as jnp
from jax import random
from flax import nn, optim


class MLP(nn.Module):
  def apply(self, x):
    x = nn.Dense(x, features=4)
    return nn.Dense(nn.relu(x), features=2)


_, params = MLP.init_by_shape(random.PRNGKey(0), [((1, 3), jnp.float32)])
model = nn.Model(MLP, params)
optimizer = optim.Momentum(learning_rate=0.1, beta=0.9).create(model)
print(sorted(jax.tree_multimap(lambda a, b: a + b, params, params)))
'''

# Removed Python, NumPy and JAX names used before anything legacy is imported.
EARLY_SCRIPT = '''
import collections
import inspect
import numpy as np
assert isinstance([], collections.Iterable)
from collections import Mapping
assert Mapping is collections.abc.Mapping
assert np.float is float and np.float_ is np.float64
assert inspect.getargspec(lambda a, b=1: a).defaults == (1,)
import jax
assert jax.tree_map(lambda x: x + 1, [1, 2]) == [2, 3]
print('split0', jax.random.split(jax.random.PRNGKey(0))[0])
print('early ok')
'''

LEGACY_TEST = '''
import collections
import jax
import jax.numpy as jnp
from flax import nn


def test_legacy_dense():
  assert issubclass(list, collections.Iterable)
  y, params = nn.Dense.init_by_shape(jax.random.PRNGKey(0),
                                     [((1, 3), jnp.float32)], features=2)
  assert y.shape == (1, 2) and sorted(params) == ['bias', 'kernel']
'''


@pytest.fixture(scope='module')
def wheel(tmp_path_factory):
  return installed.build_wheel(
      os.path.join(installed.shared_root(tmp_path_factory), 'wheel'))


@pytest.fixture(scope='module')
def venv(wheel, tmp_path_factory):
  return installed.make_venv(
      os.path.join(installed.shared_root(tmp_path_factory), 'venv'), wheel)


@pytest.fixture
def work(tmp_path):
  """A user's project folder, outside the checkout."""
  (tmp_path / 'legacy.py').write_text(LEGACY_SCRIPT)
  (tmp_path / 'early.py').write_text(EARLY_SCRIPT)
  (tmp_path / 'tests').mkdir()
  (tmp_path / 'tests' / 'test_legacy.py').write_text(LEGACY_TEST)
  return tmp_path


def _ok(proc):
  assert proc.returncode == 0, (proc.returncode, proc.stdout[-3000:],
                                proc.stderr[-5000:])
  # Nothing the hook had to give up on (report_once's lines).
  assert ' failed (' not in proc.stderr, proc.stderr[-3000:]
  return proc


def test_venv_holds_the_wheel_not_the_checkout(venv, work):
  proc = _ok(venv.run(['python', '-c', textwrap.dedent('''
      import sys, flaxlegacy
      print(flaxlegacy.__file__)
      print(any(k.startswith('__editable__') for k in sys.modules))
  ''')], cwd=work))
  where, editable = proc.stdout.split()
  assert where.startswith(venv.site), where
  assert not where.startswith(installed.REPO)
  assert editable == 'False'
  assert os.path.isfile(os.path.join(venv.site, 'flaxlegacy.pth'))


# --- FLAXLEGACY=on: legacy from the first line -------------------------------

FLAG_VARIANTS = [(), ('-I',)]


@pytest.mark.parametrize('flags', FLAG_VARIANTS, ids=['plain', 'isolated'])
@pytest.mark.parametrize('code', [
    'import numpy',
    'import jax',
    'import json, logging, enum, re, contextlib, collections',
], ids=['numpy', 'jax', 'stdlib'])
def test_flaxlegacy_on_starts(venv, work, flags, code):
  _ok(venv.run(['python', *flags, '-c', code], cwd=work, FLAXLEGACY='on'))


@pytest.mark.parametrize('flags', FLAG_VARIANTS, ids=['plain', 'isolated'])
def test_flaxlegacy_on_pytest_version(venv, work, flags):
  proc = _ok(venv.run(['python', *flags, '-m', 'pytest', '--version'],
                      cwd=work, FLAXLEGACY='on'))
  assert 'pytest' in proc.stdout + proc.stderr


@pytest.mark.parametrize('flags', FLAG_VARIANTS, ids=['plain', 'isolated'])
def test_flaxlegacy_on_early_names_before_any_legacy_import(venv, work, flags):
  proc = _ok(venv.run(['python', *flags, 'early.py'], cwd=work,
                      FLAXLEGACY='on'))
  assert 'early ok' in proc.stdout
  # Legacy mode came with `import jax`: the legacy PRNG stream.
  assert 'split0 ' + LEGACY_SPLIT0 in proc.stdout


def test_flaxlegacy_run_pytest(venv, work):
  for env in ({}, {'FLAXLEGACY': 'on'}):
    proc = _ok(venv.run(['flaxlegacy', 'run', '-m', 'pytest', '-q', '-p',
                         'no:cacheprovider', 'tests'], cwd=work, **env))
    assert '1 passed' in proc.stdout, proc.stdout


def test_flaxlegacy_run_script(venv, work):
  proc = _ok(venv.run(['flaxlegacy', 'run', 'early.py'], cwd=work))
  assert 'split0 ' + LEGACY_SPLIT0 in proc.stdout


def test_upgrade_from_the_wheel_and_the_result_runs_without_the_layer(
    venv, work):
  # every upgrade module (collectors/, rules/, rules/early_linen/) is in the
  # wheel: an editable install would hide a package left out of it
  _ok(venv.run(['flaxlegacy', 'upgrade', 'legacy.py', '--out', 'ported'],
               cwd=work))
  ported = (work / 'ported' / 'legacy.py').read_text()
  assert 'from flax import nn, optim' not in ported
  assert 'nn.compact' in ported and 'optax' in ported, ported
  assert (work / 'ported' / 'upgrade.json').is_file()
  proc = _ok(venv.run(['python', 'legacy.py'], cwd=work / 'ported',
                      FLAXLEGACY='off'))
  assert LEGACY_OUTPUT in proc.stdout, proc.stdout


# --- the default: activation by the first legacy import ----------------------


@pytest.mark.parametrize('flags', FLAG_VARIANTS, ids=['plain', 'isolated'])
def test_first_legacy_import_activates(venv, work, flags):
  proc = _ok(venv.run(['python', *flags, 'legacy.py'], cwd=work))
  assert LEGACY_OUTPUT in proc.stdout
  assert proc.stderr.count('flaxlegacy: legacy mode on') == 1


def test_default_pytest_on_a_legacy_test(venv, work):
  proc = _ok(venv.run(['python', '-m', 'pytest', '-q', '-p',
                       'no:cacheprovider', 'tests'], cwd=work))
  assert '1 passed' in proc.stdout, proc.stdout


def test_no_site_runs_through_dash_m_flaxlegacy(venv, work):
  """``python -S`` skips every .pth: ``python -m flaxlegacy`` is the way."""
  path = os.pathsep.join([venv.site, *sorted(
      l.strip() for l in open(os.path.join(venv.site, '_test_packages.pth')))])
  proc = venv.run(['python', '-S', 'legacy.py'], cwd=work, PYTHONPATH=path)
  assert proc.returncode != 0
  assert "cannot import name 'nn' from 'flax'" in proc.stderr, proc.stderr
  for script in ('legacy.py', 'early.py'):
    proc = _ok(venv.run(['python', '-S', '-m', 'flaxlegacy', script],
                        cwd=work, PYTHONPATH=path))
  assert 'early ok' in proc.stdout
  proc = _ok(venv.run(['python', '-S', '-c',
                       'import flaxlegacy; flaxlegacy.activate()\n' +
                       LEGACY_SCRIPT], cwd=work, PYTHONPATH=path))
  assert LEGACY_OUTPUT in proc.stdout


def test_flaxlegacy_off_leaves_python_alone(venv, work):
  proc = venv.run(['python', 'legacy.py'], cwd=work, FLAXLEGACY='off')
  assert proc.returncode != 0
  assert "cannot import name 'nn' from 'flax'" in proc.stderr


# --- a failure inside the hook is one line, never a dead process -------------


def test_failed_activation_at_import_jax_is_reported_once(venv, work):
  # A bad policy value makes activation raise: under FLAXLEGACY=on that
  # happens inside `import jax`, which must still succeed.
  proc = venv.run(['python', '-c', textwrap.dedent('''
      import jax, jax.numpy as jnp
      print('jax ok', int(jnp.ones(2).sum()))
      try:
        from flax import nn
      except ValueError as e:
        print('legacy import:', e)
  ''')], cwd=work, FLAXLEGACY='on', FLAXLEGACY_PRNG='maybe')
  assert proc.returncode == 0, proc.stderr
  assert 'jax ok 2' in proc.stdout
  # The user's legacy import gets the clear error itself.
  assert "legacy import: FLAXLEGACY_PRNG='maybe'" in proc.stdout
  lines = [l for l in proc.stderr.splitlines() if l.startswith('flaxlegacy:')]
  assert len(lines) == 1, proc.stderr
  assert 'activation when jax was imported failed (ValueError' in lines[0]
  assert 'legacy mode starts at the first legacy import instead' in lines[0]


def test_sixteen_threads_import_and_build_at_once(venv, work):
  code = textwrap.dedent('''
      import threading

      errors, results = [], []
      start = threading.Barrier(16)

      def build(i):
        try:
          start.wait()
          import jax, jax.numpy as jnp
          from flax import nn, optim
          from flax.nn import initializers
          _, params = nn.Dense.init_by_shape(
              jax.random.PRNGKey(i), [((1, 3), jnp.float32)], features=2)
          model = nn.Model(nn.Dense.partial(features=2), params)
          opt = optim.GradientDescent(0.1).create(model)
          results.append((i, model(jnp.ones((1, 3))).shape,
                          sorted(opt.target.params)))
        except BaseException as e:  # pylint: disable=broad-except
          errors.append(repr(e))

      threads = [threading.Thread(target=build, args=(i,)) for i in range(16)]
      for t in threads:
        t.start()
      for t in threads:
        t.join()
      assert not errors, errors
      assert sorted(results) == [(i, (1, 2), ['bias', 'kernel'])
                                 for i in range(16)], results
      print('threads ok')
  ''')
  for env in ({'FLAXLEGACY': 'on'}, {}):
    proc = _ok(venv.run(['python', '-c', code], cwd=work, **env))
    assert 'threads ok' in proc.stdout


# --- every interpreter this machine has --------------------------------------


def _candidates(version):
  """python3.X on PATH, then in pyenv's versions (whose shims may refuse)."""
  yield shutil.which(f'python{version}')
  root = os.environ.get('PYENV_ROOT') or os.path.expanduser('~/.pyenv')
  yield from sorted(glob.glob(
      os.path.join(root, 'versions', f'{version}.*', 'bin', f'python{version}')))


def _interpreters():
  found = {}
  for version in ('3.10', '3.11', '3.12', '3.13'):
    for path in _candidates(version):
      if path and _runs(path):
        found[version] = path
        break
  return found


def _runs(path):
  try:
    return subprocess.run([path, '-c', 'import sys'], capture_output=True,
                          timeout=60).returncode == 0
  except OSError:
    return False


INTERPRETERS = _interpreters()


@pytest.mark.parametrize('version', sorted(INTERPRETERS) or ['none'])
def test_start_up_on_each_python(version, wheel, tmp_path_factory, tmp_path):
  """The start-up hook alone (no JAX there): stdlib imports in either order."""
  if version == 'none':
    pytest.skip('no python3.1x interpreter on PATH')
  venv = installed.make_venv(
      os.path.join(installed.shared_root(tmp_path_factory), f'py{version}'),
      wheel, python=INTERPRETERS[version], with_packages=False)
  code = textwrap.dedent('''
      import json, logging, enum, re, contextlib
      import collections, inspect
      assert collections.Iterable is collections.abc.Iterable
      assert inspect.getargspec(lambda a: a).args == ['a']
      import flaxlegacy._hook as h
      assert h.installed()
      print('started', flaxlegacy_version := __import__('flaxlegacy').__version__)
  ''')
  for flags in ((), ('-I',)):
    for first in ('import enum', 'import re', 'import collections',
                  'import logging', 'import inspect'):
      proc = _ok(venv.run(['python', *flags, '-c', first + '\n' + code],
                          cwd=tmp_path, FLAXLEGACY='on'))
      assert 'started' in proc.stdout
  # Without FLAXLEGACY=on nothing legacy is added before activation.
  proc = venv.run(['python', '-c', 'import collections; '
                   'print(hasattr(collections, "Iterable"))'], cwd=tmp_path)
  assert proc.stdout.strip() == 'False', proc.stderr
