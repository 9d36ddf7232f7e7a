"""flaxlegacy upgrade: recurrent cells, cell-bodied scans, helper methods
that build submodules, calls of shared modules with hyper-parameters, and
dict lookups by the elements of an iterated array (rules/recurrent.py,
rules/helpers.py, rules/array_keys.py); the shipped linen cells
(flaxlegacy.migrate.legacy_cells) and ``upgraded.hashable``.

Numbers: the upgraded modules run with FLAXLEGACY=off on perturbed legacy
parameters (flaxlegacy.upgrade.verify, rtol 1e-5; measured max relative
error 0.0 on CPU: the same linen Dense computations on both sides).
"""

import os
import subprocess
import sys
import textwrap

import pytest

from flaxlegacy.upgrade import api
from flaxlegacy.upgrade import upgrade_source
from flaxlegacy.upgrade import verify

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TODO = '# TODO(flaxlegacy upgrade): '


def up(src):
  return upgrade_source(textwrap.dedent(src))


def _lines(code):
  return [l.strip() for l in code.splitlines()]


# -- initialize_carry ----------------------------------------------------------


def test_initialize_carry_in_module_body():
  code, report = up('''
      import jax
      from flax import nn
      class Enc(nn.Module):
        def apply(self, xs, hidden_size=8):
          carry = nn.LSTMCell.initialize_carry(nn.make_rng(), (xs.shape[0],),
                                               hidden_size)
          return carry
      ''')
  # zeros carry: the legacy make_rng key does not matter, so no dropout
  # stream is needed for it any more
  assert ('carry = nn.LSTMCell(self.hidden_size, parent=None).initialize_carry('
          'jax.random.PRNGKey(0), (xs.shape[0], self.hidden_size))'
          in _lines(code))
  assert 'make_rng' not in code and TODO not in code
  assert any(r['rule'] == 'recurrent' for r in report.rewritten)


def test_initialize_carry_program_level_forms():
  code, _ = up('''
      from flax import nn
      c = nn.GRUCell.initialize_carry(rng, dims, 16)
      d = nn.LSTMCell.initialize_carry(rng, (2, 3), 4,
                                       init_fn=nn.initializers.ones)
      e = nn.LSTMCell.initialize_carry(rng, (2,), 4, init_fn=lambda k, s: 0)
      ''')
  lines = _lines(code)
  assert ('c = nn.GRUCell(16, parent=None).initialize_carry(rng, '
          'tuple(dims) + (16,))') in lines
  assert ('nn.LSTMCell(4, parent=None, carry_init=nn.initializers.ones)'
          '.initialize_carry(rng, (2, 3, 4))') in code
  # a user init_fn: linen calls carry_init(key, shape, dtype) -> TODO, kept
  assert 'e = nn.LSTMCell.initialize_carry(rng, (2,), 4, init_fn=lambda' in (
      code)
  assert TODO + 'nn.LSTMCell.initialize_carry with an init_fn' in code


# -- cells in module bodies ----------------------------------------------------


def test_shared_and_called_cells():
  code, _ = up('''
      from flax import nn
      class M(nn.Module):
        def apply(self, x, carry):
          cell = nn.LSTMCell.shared(name='lstm', gate_fn=nn.sigmoid)
          carry, y = cell(carry, x)
          carry2, z = nn.GRUCell(y, y, name='gru')
          return carry, z
      ''')
  lines = _lines(code)
  assert "cell = legacy_cells.LSTMCell(name='lstm', gate_fn=nn.sigmoid)" in lines
  assert 'carry, y = cell(carry, x)' in lines
  assert "carry2, z = legacy_cells.GRUCell(name='gru')(y, y)" in lines
  assert 'from flaxlegacy.migrate import legacy_cells' in lines
  assert 'def __call__(self, x, carry):' in lines
  assert TODO not in code


def test_cells_in_program_code_keep_todo():
  code, _ = up('''
      from flax import nn
      cell = nn.LSTMCell.shared(name='c')
      y = nn.GRUCell(carry, x, name='g')
      ''')
  assert "cell = nn.LSTMCell.shared(name='c')" in code
  assert "y = nn.GRUCell(carry, x, name='g')" in code
  assert code.count(TODO + 'nn.LSTMCell') >= 1
  assert code.count(TODO + 'nn.GRUCell') >= 1


UNNAMED = """
    from flax import nn


    class Shared(nn.Module):

      def apply(self, x):
        carry = nn.LSTMCell.initialize_carry(nn.make_rng(), (x.shape[0],), 4)
        cell = nn.LSTMCell.shared()
        for t in range(x.shape[1]):
          carry, y = cell(carry, x[:, t])
        return nn.Dense(y, 2)


    class Direct(nn.Module):

      def apply(self, x):
        carry = nn.GRUCell.initialize_carry(nn.make_rng(), (x.shape[0],), 4)
        carry, y = nn.GRUCell(carry, x[:, 0])
        return nn.Dense(nn.Dense(y, 3), 2)
    """


def test_unnamed_cells_get_their_legacy_auto_names():
  # legacy counts cells on the one counter: an unnamed shared cell is '0'
  # (shared modules are named by the bare counter), the Dense after it
  # 'Dense_1'; a directly called cell is 'GRUCell_0' as in linen
  code, report = up(UNNAMED)
  assert TODO not in code, code
  assert "cell = legacy_cells.LSTMCell(name='0')" in code
  assert "nn.Dense(2, name='Dense_1')(y)" in code
  assert 'carry, y = legacy_cells.GRUCell()(carry, x[:, 0])' in code
  assert "nn.Dense(2, name='Dense_2')(nn.Dense(3, name='Dense_1')(y))" in code


def test_unnamed_cells_match_legacy(tmp_path):
  src = tmp_path / 'src'
  src.mkdir()
  (src / 'cells.py').write_text(textwrap.dedent(UNNAMED))
  status, _ = api.upgrade_paths([str(src)], out=str(tmp_path / 'out'))
  assert status == 0
  results = verify.verify_modules(
      str(src / 'cells.py'), str(tmp_path / 'out' / 'cells.py'),
      [dict(class_name=c, inputs=[((2, 3, 5), 'float32')], hyper={},
            fields=[], call=[]) for c in ('Shared', 'Direct')])
  assert [r['status'] for r in results] == ['ok', 'ok'], results


def test_unnamed_cell_under_a_condition_keeps_todo():
  code, report = up('''
      from flax import nn
      class M(nn.Module):
        def apply(self, carry, x, deep=False):
          if deep:
            x = nn.Dense(x, 3)
          cell = nn.LSTMCell.shared()
          return cell(carry, x)
      ''')
  assert 'cell = nn.LSTMCell.shared()' in code
  assert TODO + 'unnamed nn.LSTMCell' in code
  assert report.left


@pytest.mark.parametrize('scan, axes', [
    ('jax_utils.scan_in_dim(nn.LSTMCell.partial(name="lstm"), carry, xs, '
     'axis=1)', ', in_axes=1, out_axes=1'),
    ('jax_utils.scan_in_dim(nn.LSTMCell.partial(name="lstm"), carry, xs, '
     'axis=(1,))', ', in_axes=1, out_axes=1'),
    ('jax.lax.scan(nn.LSTMCell.partial(name="lstm"), carry, xs)', ''),
])
def test_cell_bodied_scan(scan, axes):
  code, _ = up(f'''
      import jax
      from flax import jax_utils
      from flax import nn
      class M(nn.Module):
        def apply(self, carry, xs):
          carry, ys = {scan}
          return ys
      ''')
  assert ("carry, ys = nn.scan(legacy_cells.LSTMCell, variable_broadcast="
          "'params', split_rngs={'params': False}" + axes +
          ")(name=\"lstm\")(carry, xs)") in _lines(code)
  assert TODO not in code


def test_scan_over_two_axes_keeps_todo():
  code, _ = up('''
      from flax import jax_utils
      from flax import nn
      class M(nn.Module):
        def apply(self, carry, xs):
          return jax_utils.scan_in_dim(nn.LSTMCell.partial(name='c'), carry,
                                       xs, axis=(0, 1))
      ''')
  assert "nn.LSTMCell.partial(name='c')" in code
  assert TODO + 'flax.jax_utils.scan_in_dim over several' in code


# -- helper methods and shared instances ---------------------------------------

SEQ2SEQ_LIKE = '''
    from flax import nn

    class Enc(nn.Module):
      def apply(self, x, size=3):
        return nn.Dense(x, size, name='d')

    class Dec(nn.Module):
      def apply(self, h, flip=False):
        h = -h if flip else h
        return nn.Dense(h, 2, name='d')

    class Top(nn.Module):
      def _create_modules(self, size):
        enc = Enc.partial(size=size).shared(name='enc')
        dec = Dec.shared(name='dec')
        return enc, dec

      def apply(self, x, flip=True, size=3):
        enc, dec = self._create_modules(size)
        return dec(enc(x), flip=flip)

    def make(rng, x):
      return Top.partial(size=4).init(rng, x)
'''


def test_helper_method_and_shared_call_kwargs():
  code, report = up(SEQ2SEQ_LIKE)
  lines = _lines(code)
  assert "enc = Enc(size=size, name='enc')" in lines
  assert "dec = Dec(name='dec')" in lines
  # a hyper-parameter given when the shared instance is called is a call
  # parameter of its class, and of the class that passes it on
  assert 'def __call__(self, h, flip=False):' in lines
  assert 'def __call__(self, x, flip=True):' in lines
  assert 'enc, dec = self._create_modules(self.size)' in lines
  assert 'return dec(enc(x), flip=flip)' in lines
  assert TODO not in code
  mods = {m['class']: m for m in report.modules}
  assert mods['Dec']['call'] == ['h', 'flip'] and mods['Dec']['fields'] == []
  assert mods['Top']['fields'] == ['size']
  assert mods['Top']['call'] == ['x', 'flip']


def test_helper_with_auto_named_modules_keeps_todo():
  code, _ = up('''
      from flax import nn
      class Top(nn.Module):
        def _mods(self):
          return nn.Dense.shared(features=3)
        def apply(self, x):
          d = self._mods()
          return d(x)
      ''')
  assert 'return nn.Dense.shared(features=3)' in code
  assert TODO + "Top: methods ['_mods']" in code


# -- dict keys from iterated arrays --------------------------------------------


def test_array_keys():
  code, report = up('''
      import jax
      class Table:
        def __init__(self, chars):
          self._index = dict((i, c) for i, c in enumerate(chars))
          self._names = ['a', 'b']
        def decode(self, ids):
          out = []
          for i in ids:
            out.append(self._index[i])
            out.append(self._names[i])
          for j in range(3):
            out.append(self._index[j])
          return out
      ''')
  lines = _lines(code)
  assert 'out.append(self._index[legacy_rng.hashable(i)])' in lines
  assert 'out.append(self._names[i])' in lines  # a list: indices are fine
  assert 'out.append(self._index[j])' in lines  # range yields ints
  assert 'from flaxlegacy.migrate import upgraded as legacy_rng' in lines
  assert [r['line'] for r in report.rewritten if r['rule'] == 'array_keys'
          ] == [10]


def test_hashable():
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from flaxlegacy.migrate import upgraded  # pylint: disable=g-import-not-at-top
  table = {2: 'x'}
  key = jnp.arange(3)[2]  # a 0-d jax.Array (what iteration yields today)
  with pytest.raises(TypeError, match='unhashable'):
    table[key]  # pylint: disable=pointless-statement
  assert table[upgraded.hashable(key)] == 'x'
  assert isinstance(upgraded.hashable(key), np.integer)
  assert upgraded.hashable(2) == 2 and upgraded.hashable('a') == 'a'
  vec = jnp.arange(3)
  assert upgraded.hashable(vec) is vec
  seen = []
  jax.jit(lambda x: seen.append(upgraded.hashable(x)) or x)(jnp.int32(1))
  assert isinstance(seen[0], jax.core.Tracer)


# -- idempotence ---------------------------------------------------------------


def test_idempotent():
  once, _ = up(SEQ2SEQ_LIKE + '''
    class Enc2(nn.Module):
      def apply(self, xs, hidden_size=4):
        carry = nn.LSTMCell.initialize_carry(nn.make_rng(), (2,), hidden_size)
        carry, _ = jax_utils.scan_in_dim(nn.LSTMCell.partial(name='lstm'),
                                         carry, xs, axis=1)
        return carry
  ''')
  twice, _ = upgrade_source(once)
  assert twice == once


# -- the shipped cells ---------------------------------------------------------


def test_legacy_cells_match_linen_and_check_features():
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from flax import linen as nn  # pylint: disable=g-import-not-at-top
  from flaxlegacy.migrate import legacy_cells  # pylint: disable=g-import-not-at-top
  x = jax.random.normal(jax.random.PRNGKey(3), (2, 5))
  for ours, theirs in ((legacy_cells.LSTMCell, nn.LSTMCell),
                       (legacy_cells.GRUCell, nn.GRUCell),
                       (legacy_cells.OptimizedLSTMCell, nn.OptimizedLSTMCell)):
    carry = theirs(4, parent=None).initialize_carry(jax.random.PRNGKey(0),
                                                    (2, 4))
    carry = jax.tree_util.tree_map(lambda c: c + 0.5, carry)
    v = ours().init(jax.random.PRNGKey(1), carry, x)
    assert (jax.tree_util.tree_structure(v) == jax.tree_util.tree_structure(
        theirs(4).init(jax.random.PRNGKey(1), carry, x)))
    a = ours().apply(v, carry, x)
    b = theirs(4).apply(v, carry, x)
    assert all(jnp.array_equal(p, q) for p, q in zip(
        jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))
    with pytest.raises(ValueError, match='features=3 but the carry has '
                       'hidden size 4'):
      ours(features=3).apply(v, carry, x)


# -- numbers -------------------------------------------------------------------

RNN_FILE = '''
import jax
import jax.numpy as jnp
from flax import jax_utils
from flax import nn


class ScanEncoder(nn.Module):
  """A cell as the scan body (sst2, seq2seq v0.1.0rc2)."""

  def apply(self, xs, hidden_size=4):
    carry = nn.LSTMCell.initialize_carry(nn.make_rng(), (xs.shape[0],),
                                         hidden_size)
    carry, ys = jax_utils.scan_in_dim(nn.LSTMCell.partial(name='lstm'),
                                      carry, xs, axis=1)
    return carry, ys


class ClosureGRU(nn.Module):
  """A shared cell in a closure (seq2seq v0.2), plus a helper method."""

  def _create_modules(self, features):
    cell = nn.GRUCell.shared(name='gru')
    head = nn.Dense.partial(features=features).shared(name='head')
    return cell, head

  def apply(self, xs, hidden_size=3, features=2):
    cell, head = self._create_modules(features)
    carry = nn.GRUCell.initialize_carry(nn.make_rng(), (xs.shape[0],),
                                        hidden_size)

    def step(c, x):
      c, y = cell(c, x)
      return c, head(y)

    if self.is_initializing():
      step(carry, xs[:, 0])
    carry, ys = jax_utils.scan_in_dim(step, carry, xs, axis=1)
    return ys
'''


def test_numbers_match_legacy(tmp_path):
  src = tmp_path / 'src'
  src.mkdir()
  (src / 'rnn.py').write_text(RNN_FILE)
  out = tmp_path / 'out'
  status, report = api.upgrade_paths([str(src)], out=str(out))
  assert status == 0
  code = (out / 'rnn.py').read_text()
  assert 'flax.nn' not in code and 'from flax import nn' not in code
  assert TODO not in code
  assert report['shipped_modules'] == [
      'flaxlegacy.migrate.legacy_cells.GRUCell',
      'flaxlegacy.migrate.legacy_cells.LSTMCell']
  mods = {m['class']: m for m in report['modules']}
  cases = [('ScanEncoder', [((2, 5, 3), 'float32')], {'hidden_size': 4}),
           ('ClosureGRU', [((2, 5, 3), 'float32')], {'hidden_size': 3})]
  results = verify.verify_modules(
      str(src / 'rnn.py'), str(out / 'rnn.py'),
      [dict(class_name=c, inputs=i, hyper=h, fields=mods[c]['fields'],
            call=mods[c]['call'], var_kw=mods[c]['var_kw'])
       for c, i, h in cases])
  for (c, _, _), r in zip(cases, results):
    assert r['status'] == 'ok', (c, r.get('detail'), r.get('stderr', '')[-3000:])
    assert r['tree'] and r['match'] and not r['legacy_imported']


def test_upgraded_cells_import_no_legacy_api():
  code = ('import sys\n'
          'from flaxlegacy.migrate import legacy_cells, upgraded\n'
          'bad = [m for m in sys.modules if m.startswith(("flax.nn", '
          '"flax.optim", "flaxlegacy.nn", "flaxlegacy.optim"))]\n'
          'assert not bad, bad\n')
  env = dict(os.environ, FLAXLEGACY='off', JAX_PLATFORMS='cpu',
             PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''))
  p = subprocess.run([sys.executable, '-c', code], env=env, cwd=ROOT,
                     capture_output=True, text=True, check=False)
  assert p.returncode == 0, p.stderr[-2000:]
