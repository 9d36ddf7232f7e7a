"""``flaxlegacy upgrade`` names the installed dependencies that call JAX
names today's JAX removed (flaxlegacy/upgrade/dependencies.py).

In a legacy process the layer serves removed names to every module, the
codebase's dependencies too (init2winit's tests call jraph 0.0.6.dev0, its
latest release, whose ``get_fully_connected_graph`` calls
``jax.tree_leaves``).  Upgraded, the codebase runs without the layer and
fails inside the dependency, at no line of its own: each import of such a
dependency gets a TODO naming the distribution, its version and the
removed names it uses.  A fake distribution in a site directory on
``PYTHONPATH`` stands for the installed one.
"""

import json
import os
import subprocess
import sys
import textwrap

from flaxlegacy.upgrade import dependencies
from tests import standalone_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _dist(site, name, requires, files, top_level=None):
  """A package ``name`` 1.0 installed in ``site`` (dist-info with RECORD;
  ``top_level``: the module it provides, where named otherwise)."""
  for rel, text in files.items():
    path = site / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
  info = site / f'{name}-1.0.dist-info'
  info.mkdir()
  meta = ['Metadata-Version: 2.1', f'Name: {name}', 'Version: 1.0'] + [
      f'Requires-Dist: {r}' for r in requires]
  (info / 'METADATA').write_text('\n'.join(meta) + '\n')
  if top_level:
    (info / 'top_level.txt').write_text(top_level + '\n')
  (info / 'RECORD').write_text(''.join(
      f'{rel},,\n' for rel in list(files) + [
          f'{name}-1.0.dist-info/METADATA', f'{name}-1.0.dist-info/RECORD']))


def _upgrade(tmp_path, site):
  src = tmp_path / 'src'
  (src / 'pkg').mkdir(parents=True)
  (src / 'pkg' / '__init__.py').write_text('')
  (src / 'pkg' / 'graphs.py').write_text(textwrap.dedent('''\
      import jax
      import oldlib
      import newlib
      import nojax
      import lgraphs as lg
      from oldlib.utils import leaves as old_leaves
      from flax import nn


      class Dense(nn.Module):
        def apply(self, x):
          return nn.Dense(x, 3)


      def count(tree):
        import oldlib.utils
        return len(old_leaves(tree)) + len(newlib.leaves(tree))
  '''))
  out = tmp_path / 'out'
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), ROOT]))
  proc = subprocess.run(
      [sys.executable, '-m', 'flaxlegacy', 'upgrade', str(src), '--out',
       str(out)], env=env, cwd=str(tmp_path), capture_output=True,
      text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return out, proc.stdout + proc.stderr


def test_imports_of_a_stale_dependency_get_a_todo(tmp_path):
  site = tmp_path / 'site'
  _dist(site, 'oldlib', ['jax (>=0.1.55)', 'numpy'], {
      'oldlib/__init__.py': 'from oldlib import utils\n',
      'oldlib/utils.py': '''\
          import jax
          from jax import tree_multimap

          try:
            tree_map = jax.tree_map
          except AttributeError:
            tree_map = jax.tree_util.tree_map

          def leaves(tree):
            return jax.tree_leaves(tree)
      ''',
      # its own tests are not what the codebase runs
      'oldlib/utils_test.py': 'import jax\nx = jax.ops.index_update\n',
  })
  # requires JAX, uses only today's names
  _dist(site, 'newlib', ['jax>=0.4', 'pytest; extra == "test"'], {
      'newlib/__init__.py': '''\
          import jax
          def leaves(tree):
            return jax.tree_util.tree_leaves(tree)
      '''})
  # a distribution named otherwise than its module
  _dist(site, 'legacy-graphs', ['jax'], {
      'lgraphs/__init__.py': 'import jax.ops\nupdate = jax.ops.index_update\n'},
        top_level='lgraphs')
  # does not require JAX: not read
  _dist(site, 'nojax', ['numpy'], {
      'nojax/__init__.py': 'import jax\nf = jax.tree_leaves\n'})
  out, stdout = _upgrade(tmp_path, site)
  code = (out / 'pkg' / 'graphs.py').read_text()
  why = ("oldlib: oldlib 1.0, as installed where the upgrade ran, uses "
         "jax.tree_leaves, jax.tree_multimap (oldlib/utils.py:2), removed "
         "from today's JAX; the upgrade rewrites only this codebase, so "
         "install a oldlib that runs on today's JAX (its latest release may "
         "not: then its repository) or patch it")
  todo = '# TODO(flaxlegacy upgrade): ' + why
  lines = code.splitlines()
  # each import of oldlib, and no other
  assert [lines[i + 1].strip() for i, l in enumerate(lines)
          if l.strip() == todo] == [
              'import oldlib', 'from oldlib.utils import leaves as old_leaves',
              'import oldlib.utils']
  lg_why = ("lgraphs: legacy-graphs 1.0, as installed where the upgrade "
            "ran, uses jax.ops.index_update (lgraphs/__init__.py:2)")
  assert [lines[i + 1].strip() for i, l in enumerate(lines)
          if l.strip().startswith('# TODO(flaxlegacy upgrade): ' + lg_why)
          ] == ['import lgraphs as lg']
  assert code.count('TODO(flaxlegacy upgrade)') == 4
  report = json.loads((out / 'upgrade.json').read_text())
  assert sorted(report['stale_dependencies']) == ['lgraphs', 'oldlib']
  assert report['stale_dependencies']['oldlib'] == {
      'distribution': 'oldlib', 'version': '1.0', 'uses': [
          {'name': 'jax.tree_multimap', 'file': 'oldlib/utils.py', 'line': 2},
          {'name': 'jax.tree_leaves', 'file': 'oldlib/utils.py', 'line': 10}]}
  assert 'pkg/graphs.py:2: oldlib: oldlib 1.0' in stdout


def test_no_stale_dependency_no_entry(tmp_path):
  site = tmp_path / 'site'
  for name in ('oldlib', 'newlib', 'nojax'):
    _dist(site, name, ['jax'], {f'{name}/__init__.py': (
        'import jax\nleaves = jax.tree_util.tree_leaves\n'
        'utils = None\n')})
  (site / 'oldlib' / 'utils.py').write_text('leaves = None\n')
  out, _ = _upgrade(tmp_path, site)
  code = (out / 'pkg' / 'graphs.py').read_text()
  assert 'TODO' not in code
  assert 'stale_dependencies' not in json.loads(
      (out / 'upgrade.json').read_text())


def test_removed_names_come_from_the_layer_table():
  from flaxlegacy.upgrade.rules import jax_names
  names = dependencies.removed_names(jax_names)
  # what jraph 0.0.6.dev0 calls, and a removed module
  assert {'jax.tree_leaves', 'jax.tree_map', 'jax.tree_multimap',
          'jax.experimental.optimizers'} <= names
  assert all(n.startswith('jax.') for n in names)
  assert 'jax.tree_util.tree_leaves' not in names
