"""Plain ``python -m pytest`` in a legacy tree runs legacy from the start.

The pytest plugin (flaxlegacy/pytest_plugin.py, a ``pytest11`` entry point)
looks at the tree before conftest files and test modules are imported; a
tree that imports the legacy Flax API runs as under ``FLAXLEGACY=on``.
Each case runs pytest in a fresh interpreter on a small tree in tmp_path.
"""

import os
import subprocess
import sys
import textwrap

from flaxlegacy import pytest_plugin
from tests.test_activation import run_python

# A data pipeline seeds its shuffle with int() of a one-element array at
# import, before anything imports the legacy API (legacy JAX converted it).
PIPELINE = '''
import jax
import numpy as np

SEED = int(jax.random.randint(jax.random.PRNGKey(0), [1], 0, 1000))


def batches(n):
  return np.random.RandomState(SEED).permutation(n)
'''

LEGACY_MODEL = '''
from flax import nn


class MLP(nn.Module):

  def apply(self, x):
    return nn.Dense(x, features=2)
'''

TEST = '''
import input_pipeline  # first: before the legacy import below
import jax
import models


def test_pipeline_and_model():
  assert sorted(input_pipeline.batches(4)) == [0, 1, 2, 3]
  # legacy PRNG stream from the first line: split as legacy JAX did
  assert int(jax.random.split(jax.random.PRNGKey(0))[0, 0]) == 4146024105
  _, params = models.MLP.init_by_shape(jax.random.PRNGKey(0), [(1, 3)])
  assert params['Dense_0']['kernel'].shape == (3, 2)
'''

MODERN_MODEL = '''
from flax import linen as nn  # today's linen only


class MLP(nn.Module):

  @nn.compact
  def __call__(self, x):
    return nn.Dense(2)(x)
'''

MODERN_TEST = '''
import jax
import pytest


def test_int_of_a_one_element_array_raises_as_today():
  import models
  with pytest.raises(TypeError, match='Only scalar arrays'):
    int(jax.random.randint(jax.random.PRNGKey(0), [1], 0, 1000))
  assert int(jax.random.split(jax.random.PRNGKey(0))[0, 0]) == 1797259609
'''


def _tree(tmp_path, files):
  for name, text in files.items():
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
  return tmp_path


def _pytest(tree, *args, env=None):
  return run_python(None, args=('-m', 'pytest', '-v', '-p', 'no:cacheprovider',
                                *args),
                    env=env, check=False, cwd=str(tree))


def test_plain_pytest_in_a_legacy_tree_is_legacy_from_the_start(tmp_path):
  tree = _tree(tmp_path, {'input_pipeline.py': PIPELINE,
                          'models.py': LEGACY_MODEL,
                          'tests/test_train.py': TEST,
                          'tests/conftest.py': 'import sys, os\n'
                          'sys.path.insert(0, os.path.dirname('
                          'os.path.dirname(__file__)))\n'})
  proc = _pytest(tree, 'tests')
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert 'test_pipeline_and_model PASSED' in proc.stdout
  assert (f'flaxlegacy: legacy tree ({tree / "models.py"}:2 imports the '
          'legacy Flax API)') in proc.stdout
  # Without the plugin the pipeline fails at collection, as before.
  proc = _pytest(tree, 'tests', env={'FLAXLEGACY_PYTEST': 'off'})
  assert proc.returncode != 0
  assert 'TypeError: Only scalar arrays can be converted' in proc.stdout
  assert 'flaxlegacy: legacy tree' not in proc.stdout


def test_a_modern_tree_is_left_alone(tmp_path):
  tree = _tree(tmp_path, {'models.py': MODERN_MODEL,
                          'test_models.py': MODERN_TEST})
  proc = _pytest(tree)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert 'flaxlegacy:' not in proc.stdout + proc.stderr
  assert 'warning' not in proc.stdout.lower()
  assert 'raises_as_today PASSED' in proc.stdout


def test_legacy_import_detection():
  cases = {
      'from flax import nn\n': 1,
      'import jax\nfrom flax import linen, optim as o\n': 2,
      'import flax.nn.linear\n': 1,
      'from flax.deprecated import nn\n': 1,
      'from flax.optim import Adam\n': 1,
      'import flax\nx = flax.nn.Dense\n': 2,
      'def f():\n  from flax import nn\n': 2,
      # today's API, and text that only mentions the legacy one
      'from flax import linen as nn\nimport flax.training\n': None,
      'import optax\nfrom flax import struct\n': None,
      '"""from flax import nn"""\n# import flax.optim\n': None,
      'from .flax import nn\n': None,
  }
  for source, line in cases.items():
    assert pytest_plugin.legacy_import(source) == line, source


def test_scan_skips_environments_and_stops_at_its_limit(tmp_path):
  _tree(tmp_path, {'venv/pyvenv.cfg': '', 'venv/lib/old.py': LEGACY_MODEL,
                   '.hidden/old.py': LEGACY_MODEL,
                   'site-packages/old.py': LEGACY_MODEL,
                   'pkg/a.py': 'x = 1\n', 'pkg/b.py': LEGACY_MODEL})
  assert pytest_plugin.find_legacy_import([str(tmp_path)]) == (
      f'{tmp_path / "pkg" / "b.py"}:2')
  assert pytest_plugin.find_legacy_import([str(tmp_path)], max_files=1) is None
  os.remove(tmp_path / 'pkg' / 'b.py')
  assert pytest_plugin.find_legacy_import([str(tmp_path)]) is None


def test_plugin_is_registered_for_pytest():
  proc = subprocess.run(
      [sys.executable, '-c', 'from importlib.metadata import entry_points; '
       'print([e.value for e in entry_points(group="pytest11") '
       'if e.name == "flaxlegacy"])'], capture_output=True, text=True,
      check=True)
  assert proc.stdout.strip() == "['flaxlegacy.pytest_plugin']"
