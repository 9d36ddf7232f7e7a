"""`flaxlegacy check`: the scanner reports legacy names from the one table."""

import json
import os
import subprocess
import sys
import textwrap
import types

import pytest

from flaxlegacy import _names
from flaxlegacy.migrate import check
from tests import conformance

LEGACY_CODE = textwrap.dedent('''\
    import jax
    import jax.numpy as jnp
    from jax import lax
    from flax import nn, optim
    from jax.config import config
    from jax.experimental import host_callback


    class CNN(nn.Module):
      def apply(self, x):
        x = nn.Conv(x, features=32, kernel_size=(3, 3))
        x = nn.relu(x)
        return nn.NotALayer(x)


    def step(optimizer, grads):
      grads = jax.tree_multimap(lambda g: g, grads)
      jax.config.update('jax_enable_x64', False)
      y = lax.tie_in(grads, 1.)
      return optimizer.apply_gradient(grads), jax.ops.index_update(y, 0, 1.)


    opt_def = optim.Momentum(learning_rate=0.1, beta=0.9)
    ''')

CLEAN_CODE = textwrap.dedent('''\
    import jax
    from flax import nn

    def f(x):
      return jax.tree_multimap(nn.relu, x)
    ''')


def _lines(findings):
  return {(f.line, f.name, f.status) for f in findings}


def test_scan_source_finds_every_legacy_name():
  findings = check.scan_source(LEGACY_CODE, 'train.py')
  got = _lines(findings)
  expected = {
      (4, 'flax.nn', check.SUPPORTED),
      (4, 'flax.optim', check.SUPPORTED),
      (5, 'jax.config', check.SUPPORTED),
      (6, 'jax.experimental.host_callback', check.UNSUPPORTED),
      (9, 'flax.nn.Module', check.SUPPORTED),
      (11, 'flax.nn.Conv', check.SUPPORTED),
      (12, 'flax.nn.relu', check.SUPPORTED),
      (13, 'flax.nn.NotALayer', check.UNSUPPORTED),
      (17, 'jax.tree_multimap', check.SUPPORTED),
      (19, 'jax.lax.tie_in', check.SUPPORTED),
      (20, 'jax.ops.index_update', check.SUPPORTED),
      (23, 'flax.optim.Momentum', check.SUPPORTED),
  }
  assert expected <= got, sorted(expected - got)
  # Modern uses are not reported: jax.config.update (the Config object) and
  # plain jax.numpy.
  assert not any(f.line == 18 for f in findings)
  assert not any(f.name.startswith('jax.numpy') for f in findings)
  by_name = {f.name: f for f in findings}
  assert by_name['flax.nn.Conv'].modern == 'flax.linen.Conv'
  assert by_name['flax.nn.Conv'].versions == 'v0.1.0rc2-v0.3.6'
  assert by_name['jax.tree_multimap'].versions == 'removed in jax 0.3.16'
  assert by_name['jax.tree_multimap'].modern == 'jax.tree_util.tree_map'
  assert 'removed from JAX' in by_name['jax.experimental.host_callback'].note
  assert "does not provide 'NotALayer'" in by_name['flax.nn.NotALayer'].note


def test_stochastic_function_is_not_the_submodule():
  findings = check.scan_source(
      'from flax import nn\nwith nn.stochastic(key):\n  pass\n')
  [f] = [f for f in findings if f.line == 2]
  assert (f.name, f.versions) == ('flax.nn.stochastic', 'v0.1.0rc2-v0.3.6')


def _run_cli(*args):
  return subprocess.run(
      [sys.executable, '-m', 'flaxlegacy', 'check', *args],
      capture_output=True, text=True, timeout=300,
      env=dict(os.environ, JAX_PLATFORMS='cpu'), cwd=conformance.REPO)


def test_cli_reports_file_line_and_fails_on_unsupported(tmp_path):
  (tmp_path / 'pkg').mkdir()
  (tmp_path / 'pkg' / 'train.py').write_text(LEGACY_CODE)
  (tmp_path / 'pkg' / 'broken.py').write_text('def (:\n')
  proc = _run_cli(str(tmp_path))
  assert proc.returncode == 1, proc.stderr
  out = proc.stdout
  path = os.path.join(str(tmp_path), 'pkg', 'train.py')
  assert (f'{path}:17:11: jax.tree_multimap: supported (removed in jax '
          '0.3.16); today: jax.tree_util.tree_map; alias added by '
          'flaxlegacy') in out
  assert f'{path}:13:12: flax.nn.NotALayer: unsupported' in out
  assert 'broken.py: not scanned (SyntaxError' in out
  assert 'unsupported: flax.nn.NotALayer, jax.experimental.host_callback' in out
  assert 'legacy mode on' not in proc.stdout + proc.stderr


def test_cli_exit_zero_when_all_supported_and_json(tmp_path):
  (tmp_path / 'ok.py').write_text(CLEAN_CODE)
  proc = _run_cli('--json', str(tmp_path / 'ok.py'))
  assert proc.returncode == 0, proc.stdout + proc.stderr
  data = json.loads(proc.stdout)
  names = sorted((f['line'], f['name'], f['status']) for f in data['findings'])
  assert names == [(2, 'flax.nn', 'supported'),
                   (5, 'flax.nn.relu', 'supported'),
                   (5, 'jax.tree_multimap', 'supported')]


def test_cli_bad_path_is_a_usage_error(tmp_path):
  proc = _run_cli(str(tmp_path / 'nope'))
  assert proc.returncode == 2
  assert 'no such file or directory' in proc.stderr


def test_coverage_doc_is_generated_from_the_table():
  path = os.path.join(conformance.REPO, 'docs', 'coverage.md')
  with open(path) as f:
    assert f.read() == check.coverage_markdown(), (
        'docs/coverage.md is stale: regenerate it with '
        '`python -m flaxlegacy.migrate.check --coverage-md > docs/coverage.md`')


@pytest.mark.parametrize('package', ['flax.nn', 'flax.optim'])
def test_table_and_package_agree(package):
  """Every listed name is provided, and every public name is listed."""
  import importlib  # pylint: disable=g-import-not-at-top
  module = importlib.import_module(_names.MODULES_BY_LEGACY[package].target)
  listed = set(_names.top_level_names(package))
  missing = sorted(n for n in listed if not hasattr(module, n))
  assert not missing, f'{package} lacks names the table lists: {missing}'
  public = {n for n in dir(module) if not n.startswith('_') and
            not isinstance(getattr(module, n), types.ModuleType)}
  unlisted = sorted(public - listed)
  assert not unlisted, (f'{package} exports names missing from '
                        f'flaxlegacy/_names.py: {unlisted}')


def test_every_listed_submodule_symbol_is_provided():
  missing = []
  for name in _names.SYMBOLS:
    if not name.startswith(('flax.nn.', 'flax.optim.')):
      continue
    if not check._provided(name):  # pylint: disable=protected-access
      missing.append(name)
  assert not missing, missing
