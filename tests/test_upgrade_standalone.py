"""An upgraded tree stands alone: the flaxlegacy helpers it uses are copied
into it (flaxlegacy/upgrade/shipping.py), and it runs where flaxlegacy is
not installed.

The copy's code is the helpers' own (tested where they live, in
flaxlegacy.migrate); these cases check the copy itself, where it goes and
how the code imports it, and run upgraded programs in an environment
without flaxlegacy (tests/standalone_env.py).
"""

import importlib
import inspect
import io
import os
import subprocess
import textwrap
import tokenize

import pytest

from flaxlegacy.upgrade import api
from flaxlegacy.upgrade import shipping
from tests import standalone_env

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def flaxlegacy_outside_comments(root):
  """(file, line) of every 'flaxlegacy' in the Python files under ``root``
  that is not inside a comment."""
  found = []
  for dirpath, _, files in os.walk(root):
    for f in sorted(files):
      if not f.endswith('.py'):
        continue
      path = os.path.join(dirpath, f)
      with open(path, encoding='utf-8') as fh:
        text = fh.read()
      rel = os.path.relpath(path, root)
      try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
          if tok.type != tokenize.COMMENT and 'flaxlegacy' in tok.string:
            found.append((rel, tok.start[0]))
      except (tokenize.TokenError, SyntaxError):
        # a file that does not tokenize (one broken upstream, copied as
        # it was): lines, each up to its '#'
        found += [(rel, i + 1) for i, line in enumerate(text.splitlines())
                  if 'flaxlegacy' in line.split('#')[0]]
  return found


def _all_names():
  h = shipping.helpers()
  return sorted(n for names in h.public.values() for n in names)


def test_copy_of_every_helper_is_their_code_and_names_no_flaxlegacy(tmp_path):
  src = shipping.helper_source(_all_names())
  assert src.startswith(shipping.HEADER)
  (tmp_path / 'legacy_helpers.py').write_text(src)
  assert flaxlegacy_outside_comments(tmp_path) == []
  compile(src, 'legacy_helpers.py', 'exec')
  # every definition is the helper's own source, unchanged
  for module in shipping.MODULES:
    mod = importlib.import_module(module)
    for name in shipping.helpers().public[module]:
      value = getattr(mod, name)
      if isinstance(value, (str, int, float, tuple, frozenset, dict)):
        # a constant: its assignment, as written there
        assert shipping.helpers().defs[name].source in src, (module, name)
        continue
      assert inspect.getsource(value) in src, (module, name)


def test_copy_holds_what_is_asked_and_what_it_needs():
  src = shipping.helper_source(['lamb'])
  assert "__all__ = ['lamb']" in src
  assert 'def lamb(' in src and 'def _lamb(' in src
  assert 'def scale_by_legacy_trust_ratio(' in src  # _lamb's piece
  assert 'def lars(' not in src and 'restore_checkpoint' not in src
  assert 'import types' not in src  # only adafactor needs it


def test_uses_reads_module_aliases_and_names():
  code = textwrap.dedent('''
      from flaxlegacy.migrate import legacy_optax, upgraded as legacy_rng
      from flaxlegacy.migrate.upgraded_attention import legacy_attention_mask
      tx = legacy_optax.lamb(0.1)
      k = legacy_rng.hashable(x)
      ''')
  used = shipping.uses(code)
  m = 'flaxlegacy.migrate.'
  assert used == {m + 'legacy_optax': {'lamb'}, m + 'upgraded': {'hashable'},
                  m + 'upgraded_attention': {'legacy_attention_mask'}}
  assert shipping.names_of(used) == {'lamb', 'hashable',
                                     'legacy_attention_mask'}
  with pytest.raises(ValueError, match='legacy_optax has no sgd to copy'):
    shipping.names_of({m + 'legacy_optax': {'sgd'}})


PROGRAM = '''
from flax import nn
from flax import optim
import jax.numpy as jnp


class Net(nn.Module):

  def apply(self, x):
    return nn.GroupNorm(nn.Dense(x, 4), num_groups=2)


def create(key):
  _, params = Net.init_by_shape(key, [((1, 3), jnp.float32)])
  return optim.LAMB(0.1).create(nn.Model(Net, params))
'''


def _tree(root, files):
  for rel, text in files.items():
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
  return root


@pytest.mark.parametrize('how', ['bare', 'package', 'relative'])
def test_import_lines_rewritten_alone_as_the_whole_file_would_be(how):
  """rewrite_imports rewrites only the import lines; where that is certain
  it writes what the whole-file rewrite writes, else it takes that path."""
  home = shipping.Home('/x', how, 'pkg')
  cases = {
      'nested and on one line': (
          'import os\nfrom flaxlegacy.migrate import upgraded as legacy_rng'
          '\n\ndef f():\n  # c\n  from flaxlegacy.migrate.legacy_optax '
          'import a, b  # t\n  x = 1; from flaxlegacy.migrate import '
          'legacy_optax\n  return x\n'),
      'parenthesised, two names': (
          'from flaxlegacy.migrate.upgraded_layers import (\n    x,\n    y)'
          '\nimport flaxlegacy.migrate.upgraded as u, os\n'),
      'sharing a line with a longer statement': (
          'def g():\n    y = foo(1,\n  2); import flaxlegacy.migrate.'
          'upgraded as u\n'),
      'no final newline': 'from flaxlegacy.migrate import upgraded',
      'inside a compound line': (
          'if True: from flaxlegacy.migrate import upgraded\n'),
      'nothing to do': 'a = 1\n',
  }
  fast_path = 0
  for what, code in cases.items():
    whole = shipping.cst.parse_module(code).visit(
        shipping._Imports(home, 'legacy_helpers')).code  # pylint: disable=protected-access
    assert shipping.rewrite_imports(code, home) == whole, what
    fast = shipping._rewrite_import_lines(code, home, 'legacy_helpers')  # pylint: disable=protected-access
    assert fast in (None, whole), what
    fast_path += fast is not None
    if 'flaxlegacy' in code and what != 'inside a compound line':
      assert 'legacy_helpers' in whole, what
  # the lines alone where they can be; the compound line and the line
  # whose indentation cannot be taken off alike go the whole-file way
  assert fast_path == 4


def test_flat_directory_gets_a_sibling_copy(tmp_path):
  src = _tree(tmp_path / 'src', {'train.py': PROGRAM,
                                 'train_test.py': 'import train\n'})
  status, report = api.upgrade_paths([str(src)], out=str(tmp_path / 'out'))
  assert status == 0
  code = (tmp_path / 'out' / 'train.py').read_text()
  assert 'import legacy_helpers as legacy_optax\n' in code
  assert 'import legacy_helpers as upgraded_layers\n' in code
  assert 'legacy_optax.lamb(0.1)' in code
  assert [(s['path'], s['import'], sorted(s['names'])) for s in
          report['shipped']] == [('legacy_helpers.py', 'legacy_helpers',
                                  ['GroupNorm', 'lamb'])]
  assert report['shipped'][0]['names']['lamb'] == (
      'flaxlegacy.migrate.legacy_optax.lamb')
  assert report['shipped_modules'] == [
      'flaxlegacy.migrate.legacy_optax.lamb',
      'flaxlegacy.migrate.upgraded_layers.GroupNorm']
  assert flaxlegacy_outside_comments(tmp_path / 'out') == []


def test_package_gets_one_copy_at_its_top(tmp_path):
  src = _tree(tmp_path / 'proj', {
      'pkg/__init__.py': '',
      'pkg/models/__init__.py': '',
      'pkg/models/net.py': PROGRAM,
      'pkg/train/__init__.py': '',
      'pkg/train/loop.py': '''
          from pkg.models import net
          from flax.training import checkpoints

          from flax import optim

          def restore(d, state):
            return checkpoints.restore_checkpoint(d, state)

          tx = optim.Adagrad(0.1)
          ''',
  })
  status, report = api.upgrade_paths([str(src)], out=str(tmp_path / 'out'))
  assert status == 0
  out = tmp_path / 'out'
  assert [s['path'] for s in report['shipped']] == [
      os.path.join('pkg', 'legacy_helpers.py')]
  assert sorted(report['shipped'][0]['names']) == [
      'GroupNorm', 'adagrad', 'lamb', 'restore_checkpoint']
  assert 'from pkg import legacy_helpers as legacy_optax\n' in (
      out / 'pkg' / 'models' / 'net.py').read_text()
  assert 'from pkg import legacy_helpers as legacy_checkpoints\n' in (
      out / 'pkg' / 'train' / 'loop.py').read_text()
  assert not (out / 'pkg' / 'models' / 'legacy_helpers.py').exists()


def test_relative_imports_get_a_relative_import(tmp_path):
  src = _tree(tmp_path / 'src', {
      'lib/__init__.py': 'from . import net\n',
      'lib/net.py': PROGRAM,
  })
  status, _ = api.upgrade_paths([str(src / 'lib')], out=str(tmp_path / 'out'))
  assert status == 0
  code = (tmp_path / 'out' / 'net.py').read_text()
  assert 'from . import legacy_helpers as legacy_optax\n' in code, code


def test_a_user_module_of_the_same_name_is_left_alone(tmp_path):
  src = _tree(tmp_path / 'src', {'train.py': PROGRAM,
                                 'legacy_helpers.py': 'X = 1\n'})
  status, report = api.upgrade_paths([str(src)], out=str(tmp_path / 'out'))
  assert status == 0
  assert (tmp_path / 'out' / 'legacy_helpers.py').read_text() == 'X = 1\n'
  assert report['shipped'][0]['path'] == 'legacy_helpers_2.py'
  assert 'import legacy_helpers_2 as legacy_optax' in (
      tmp_path / 'out' / 'train.py').read_text()


def test_upgrading_again_keeps_and_adds_to_the_copy(tmp_path):
  src = _tree(tmp_path / 'src', {'train.py': PROGRAM})
  out1, out2 = tmp_path / 'out1', tmp_path / 'out2'
  assert api.upgrade_paths([str(src)], out=str(out1))[0] == 0
  buf = io.StringIO()
  status, _ = api.upgrade_paths([str(out1)], diff=True, stdout=buf)
  assert (status, buf.getvalue()) == (0, '')
  # a new legacy file beside the upgraded ones: the copy grows
  (out1 / 'more.py').write_text(textwrap.dedent('''
      from flax import optim
      tx = optim.Adagrad(0.1)
      '''))
  status, report = api.upgrade_paths([str(out1)], out=str(out2))
  assert status == 0
  assert sorted(report['shipped'][0]['names']) == ['GroupNorm', 'adagrad',
                                                   'lamb']
  text = (out2 / 'legacy_helpers.py').read_text()
  assert 'def adagrad(' in text and 'def lamb(' in text
  assert (out2 / 'train.py').read_text() == (out1 / 'train.py').read_text()


def test_diff_and_in_place_write_the_copy_too(tmp_path):
  src = _tree(tmp_path / 'src', {'train.py': PROGRAM})
  buf = io.StringIO()
  status, _ = api.upgrade_paths([str(src)], diff=True, stdout=buf)
  assert status == 1
  assert f'+++ {src / "legacy_helpers.py"}' in buf.getvalue()
  assert not (src / 'legacy_helpers.py').exists()
  assert api.upgrade_paths([str(src)], in_place=True)[0] == 0
  assert (src / 'legacy_helpers.py').read_text().startswith(shipping.HEADER)
  assert flaxlegacy_outside_comments(src) == []


def test_removed_xla_bridge_gets_the_copied_stand_in(tmp_path):
  """``from jax.lib import xla_bridge`` (removed from JAX): flaxlegacy's
  stand-in module, copied like the other helpers."""
  src = _tree(tmp_path / 'src', {'t.py': '''
      from jax.lib import xla_bridge

      def reset():
        xla_bridge.get_backend.cache_clear()
        return xla_bridge.device_count()
      '''})
  status, report = api.upgrade_paths([str(src)], out=str(tmp_path / 'out'))
  assert status == 0
  code = (tmp_path / 'out' / 't.py').read_text()
  assert 'import legacy_helpers as xla_bridge\n' in code, code
  assert sorted(report['shipped'][0]['names']) == ['device_count',
                                                   'get_backend']
  namespace = {}
  exec(compile((tmp_path / 'out' / 'legacy_helpers.py').read_text(),  # pylint: disable=exec-used
               'legacy_helpers.py', 'exec'), namespace)
  namespace['get_backend'].cache_clear()
  assert namespace['device_count']() >= 1


def test_removed_xla_bridge_spelled_out_gets_the_copied_stand_in(tmp_path):
  """``jax.lib.xla_bridge.get_backend()`` through ``import jax`` (scenic's
  debug_utils): imported by name, so the stand-in is copied too; never a
  bare ``flaxlegacy.compat`` reference in the upgraded tree."""
  src = _tree(tmp_path / 'src', {'t.py': '''
      import jax

      def platform():
        return jax.lib.xla_bridge.get_backend().platform
      '''})
  status, report = api.upgrade_paths([str(src)], out=str(tmp_path / 'out'))
  assert status == 0
  code = (tmp_path / 'out' / 't.py').read_text()
  assert 'import legacy_helpers as xla_bridge\n' in code, code
  assert 'return xla_bridge.get_backend().platform' in code, code
  assert 'flaxlegacy' not in code
  assert sorted(report['shipped'][0]['names']) == ['get_backend']


def test_upgrade_source_keeps_the_flaxlegacy_import():
  """One string has no tree to copy into: the helper keeps its home."""
  new, _ = api.upgrade_source(textwrap.dedent(PROGRAM))
  assert 'from flaxlegacy.migrate import legacy_optax' in new


# --- running without flaxlegacy -----------------------------------------------

RUNS = '''
from flax import nn
from flax import optim
from flax.training import checkpoints
import jax
import jax.numpy as jnp
import numpy as np


class Net(nn.Module):

  def apply(self, x, carry):
    x = nn.GroupNorm(nn.Dense(x, 4), num_groups=2)
    carry, y = nn.LSTMCell(carry, x, name='cell')
    y = y[:, None, :]
    return nn.SelfAttention(y, num_heads=2, qkv_features=4,
                            causal_mask=True, name='att')


def main(ckpt):
  key = jax.random.PRNGKey(0)
  carry = nn.LSTMCell.initialize_carry(key, (2,), 4)
  _, params = Net.init_by_shape(key, [((2, 3), jnp.float32)], carry=carry)
  model = nn.Model(Net, params)
  optimizer = optim.LAMB(0.1).create(model)
  x = jnp.ones((2, 3))

  def loss_fn(model):
    return jnp.mean(model(x, carry=carry) ** 2)

  grad = jax.grad(loss_fn)(optimizer.target)
  optimizer = optimizer.apply_gradient(grad)
  checkpoints.save_checkpoint(ckpt, optimizer, 1)
  optimizer = checkpoints.restore_checkpoint(ckpt, optimizer)
  with nn.stochastic(key):
    r = nn.make_rng()
  print('OK', int(optimizer.state.step), r.shape)
'''


def test_upgraded_program_runs_without_flaxlegacy(tmp_path,
                                                  python_without_flaxlegacy):
  src = _tree(tmp_path / 'src', {'prog.py': RUNS})
  status, report = api.upgrade_paths([str(src)], out=str(tmp_path / 'out'))
  assert status == 0
  out = tmp_path / 'out'
  assert flaxlegacy_outside_comments(out) == []
  assert sorted(report['shipped'][0]['names']) == [
      'GroupNorm', 'LSTMCell', 'lamb', 'legacy_attention_mask', 'make_rng',
      'restore_checkpoint', 'save_checkpoint', 'stochastic']
  env = standalone_env.env(PYTHONPATH=str(out))
  absent = subprocess.run(
      [python_without_flaxlegacy, '-c', 'import flaxlegacy'], env=env,
      cwd=str(out), capture_output=True, text=True, timeout=300)
  assert absent.returncode != 0
  assert "No module named 'flaxlegacy'" in absent.stderr, absent.stderr
  run = subprocess.run(
      [python_without_flaxlegacy, '-c',
       f'import prog; prog.main({str(tmp_path / "ckpt")!r})'], env=env,
      cwd=str(out), capture_output=True, text=True, timeout=600)
  assert run.returncode == 0, run.stdout + run.stderr[-3000:]
  assert 'OK 1 (2,)' in run.stdout, run.stdout + run.stderr[-3000:]


def test_examples_upgraded_name_flaxlegacy_only_in_comments(tmp_path):
  """The examples' own docstrings name flaxlegacy (``flaxlegacy data
  mnist``); the upgrade adds the name nowhere but in comments."""
  for example in ('mnist', 'imagenet'):
    src = os.path.join(REPO, 'examples', example)
    out = tmp_path / example
    status, report = api.upgrade_paths([src], out=str(out))
    assert status == 0 and report['summary']['todos'] == 0, example
    added = _texts(out, flaxlegacy_outside_comments(out))
    added -= _texts(src, flaxlegacy_outside_comments(src))
    assert added == set(), example
  # imagenet keeps legacy's checkpoint files, and its test reads a
  # collection's as_dict(): the helpers are copied
  assert [sorted(s['names']) for s in report['shipped']] == [
      ['collection_dict', 'restore_checkpoint', 'save_checkpoint']]


def _texts(root, found):
  out = set()
  for rel, line in found:
    with open(os.path.join(root, rel), encoding='utf-8') as f:
      out.add((rel, f.read().splitlines()[line - 1].strip()))
  return out


def test_statement_walk_finds_every_statement_and_import():
  """shipping finds imports by walking statements only (not expressions):
  the same statements as ``ast.walk``, at every depth a statement can be."""
  import ast  # pylint: disable=g-import-not-at-top
  code = textwrap.dedent('''
      import a
      def f():
        from flaxlegacy.migrate import legacy_optax as o
        o.lamb(1)
        class C:
          import b
        try:
          import c
        except E:
          import d
        else:
          import e
        finally:
          import f
      while x:
        if y:
          import g
        else:
          import h
      match z:
        case 1:
          import i
      with w:
        for q in r:
          import j
        else:
          import k
      async def g():
        async with v:
          import l
      try:
        pass
      except* E:
        import m
      ''')
  tree = ast.parse(code)
  want = sorted(id(n) for n in ast.walk(tree) if isinstance(n, ast.stmt))
  got = shipping._statements(tree)  # pylint: disable=protected-access
  assert sorted(map(id, got)) == want
  imported = {a.name for n in got if isinstance(n, ast.Import) for a in n.names}
  assert imported == set('abcdefghijklm')
  assert shipping.uses(code) == {'flaxlegacy.migrate.legacy_optax': {'lamb'}}
  here = os.path.dirname(os.path.abspath(shipping.__file__))
  for name in sorted(os.listdir(here)):
    if name.endswith('.py'):
      with open(os.path.join(here, name), encoding='utf-8') as fh:
        tree = ast.parse(fh.read())
      got = shipping._statements(tree)  # pylint: disable=protected-access
      assert sorted(map(id, got)) == sorted(
          id(n) for n in ast.walk(tree) if isinstance(n, ast.stmt)), name


def test_imports_read_from_the_libcst_tree_as_from_ast():
  """Where the parse made a file's libcst tree, the copy's home reads the
  file's imports from it (no second parse with ``ast``): the same names
  and relative flag as from ``ast``, at every depth a statement can be."""
  import libcst as cst  # pylint: disable=g-import-not-at-top
  code = textwrap.dedent('''
      import a.b, c as d
      from e.f import g, h as i
      def f():
        from flaxlegacy.migrate import legacy_optax as o
        class C:
          import j
        try:
          import k
        except E:
          from l import *
        else:
          import m
        finally:
          import n
      while x:
        if y: import o.p
        else:
          import q
      match z:
        case 1:
          import r
      with w:
        for s in t:
          import u
        else:
          import v
      async def g():
        async with v:
          import w
      try:
        pass
      except* E:
        import x
      lambda: __import__('y')
      ''')
  names, relative = shipping._imports_of_module(cst.parse_module(code))  # pylint: disable=protected-access
  assert (names, relative) == shipping._imports_of(code)  # pylint: disable=protected-access
  assert {'a.b', 'c', 'e.f.g', 'l.*', 'o.p', 'x', 'flaxlegacy.migrate'} <= names
  assert not relative
  rel = 'from . import a\nif b:\n  from .c import d\n'
  assert shipping._imports_of_module(cst.parse_module(rel)) == (  # pylint: disable=protected-access
      shipping._imports_of(rel)) == (set(), True)  # pylint: disable=protected-access
  for sub in ('examples', os.path.join('flaxlegacy', 'upgrade')):
    for dirpath, _, files in os.walk(os.path.join(REPO, sub)):
      for name in sorted(files):
        if name.endswith('.py'):
          with open(os.path.join(dirpath, name), encoding='utf-8') as fh:
            text = fh.read()
          assert shipping._imports_of_module(cst.parse_module(text)) == (  # pylint: disable=protected-access
              shipping._imports_of(text)), name  # pylint: disable=protected-access
