"""``flaxlegacy upgrade`` rewrites early linen (flax 0.3.x) as today's linen.

One case per rule (flaxlegacy/upgrade/rules/early_linen/): the source as
2021 code wrote it and the rewrite.  The numeric proof upgrades
tests/early_linen (flax 0.3-style models and a training loop over them)
and runs both sides: the original in a legacy process, the rewrite with
``FLAXLEGACY=off``.  Both draw parameter keys as today's linen does
(``FLAXLEGACY_LINEN_KEYS=modern``, ``FLAXLEGACY_PRNG=modern``: no source
rewrite can bring back flax 0.3's keys, and the rewrite says so in a TODO),
so every number must be the same.
"""

import json
import os
import subprocess
import textwrap
from unittest import mock

import pytest

from flaxlegacy.upgrade import api
from flaxlegacy.upgrade.rules.early_linen import jax_calls
from flaxlegacy.upgrade.rules.early_linen import keys
from tests import standalone_env
from tests import test_early_linen
from tests.test_activation import run_python
from tests.test_upgrade_standalone import flaxlegacy_outside_comments

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'early_linen')

HEAD = 'import jax\nimport flax.linen as nn\n'

CASES = [
    # initializers: a two-argument initializer gets today's dtype argument
    ('initializers', '''
        def cplx_init(rng, shape):
          return jax.random.normal(rng, shape) + 0j
        layer = nn.Dense(4, kernel_init=cplx_init)
     ''', '''
        def cplx_init(rng, shape, dtype=None):
          return jax.random.normal(rng, shape) + 0j
        layer = nn.Dense(4, kernel_init=cplx_init)
     '''),
    # ... and a partial that binds dtype= is called as flax 0.3 called it
    ('initializers', '''
        init = functools.partial(jax.nn.initializers.normal(), dtype=c64)
        a = nn.Dense(4, kernel_init=init)
        b = nn.Conv(4, (3, 3), bias_init=functools.partial(f, dtype=c64))
     ''', '''
        init = functools.partial(jax.nn.initializers.normal(), dtype=c64)
        a = nn.Dense(4, kernel_init=upgraded_layers.legacy_initializer(init))
        b = nn.Conv(4, (3, 3), bias_init=upgraded_layers.legacy_initializer(functools.partial(f, dtype=c64)))
     '''),
    # ... and a definition whose parameters say it is an initializer, used
    # elsewhere (``kernel_init=nets.initializers.cplx_variance_scaling``)
    ('initializers', '''
        def cplx_variance_scaling(key, shape):
          return unif(key, shape, dtype=c64) * x.dtype
        def helper(a, shape):
          return a + shape
     ''', '''
        def cplx_variance_scaling(key, shape, dtype=None):
          return unif(key, shape, dtype=c64) * x.dtype
        def helper(a, shape):
          return a + shape
     '''),
    # carries: the static initialize_carry -> today's instance method
    ('carries', '''
        c = nn.LSTMCell.initialize_carry(rng, (batch,), 8)
        h = nn.GRUCell.initialize_carry(rng, dims, 8, nn.initializers.ones)
        k = nn.OptimizedLSTMCell.initialize_carry(rng, (2,), n, my_init)
        v = nn.ConvLSTM.initialize_carry(rng, (2,), (4, 4, 3))
     ''', '''
        c = nn.LSTMCell(features=8, parent=None).initialize_carry(rng, (batch, 8))
        h = nn.GRUCell(features=8, carry_init=nn.initializers.ones, parent=None).initialize_carry(rng, tuple(dims) + (8,))
        k = nn.OptimizedLSTMCell(features=n, carry_init=upgraded_layers.legacy_initializer(my_init), parent=None).initialize_carry(rng, (2, n))
        v = legacy_cells.ConvLSTM(features=3, kernel_size=(1, 1), parent=None).initialize_carry(rng, (2, 4, 4, 3))
     '''),
    # ... and cells built without features (or by a transform)
    ('carries', '''
        carry, y = nn.LSTMCell()(carry, x)
        carry, y = nn.GRUCell(name='gru')(carry, x)
        kept = nn.LSTMCell(features=4)
        scanned = nn.scan(nn.OptimizedLSTMCell, variable_broadcast='params')
        conv = nn.ConvLSTM(4, (3, 3))
     ''', '''
        carry, y = legacy_cells.LSTMCell()(carry, x)
        carry, y = legacy_cells.GRUCell(name='gru')(carry, x)
        kept = nn.LSTMCell(features=4)
        scanned = nn.scan(legacy_cells.OptimizedLSTMCell, variable_broadcast='params')
        conv = legacy_cells.ConvLSTM(4, (3, 3))
     '''),
    # frozendict: FrozenDict methods -> flax.core functions
    ('frozendict', '''
        variables = model.init(rng, x)
        state, params = variables.pop('params')
        params = params.unfreeze()
        variables = state.copy({'params': params})
        text = variables.pretty_repr()
        value = plain_dict.pop('key')
     ''', '''
        variables = model.init(rng, x)
        state, params = flax.core.pop(variables, 'params')
        params = flax.core.unfreeze(params)
        variables = flax.core.copy(state, {'params': params})
        text = flax.core.pretty_repr(variables)
        value = plain_dict.pop('key')
     '''),
    # param_override: today's extra param_dtype argument is taken and ignored
    ('param_override', '''
        class StdConv(nn.Conv):
          def param(self, name, init_fn, shape):
            return super().param(name, init_fn, shape)
     ''', '''
        class StdConv(nn.Conv):
          def param(self, name, init_fn, shape, *unused_init_args, **unused_init_kwargs):
            return super().param(name, init_fn, shape)
     '''),
    # attention: the positional mask -> mask=
    ('attention', '''
        class Block(nn.Module):
          def setup(self):
            self.attn = nn.MultiHeadDotProductAttention(num_heads=2)
          def __call__(self, x, mask):
            y = self.attn(x, x, mask, True)
            return y + nn.MultiHeadDotProductAttention(num_heads=2)(x, x, mask)
     ''', '''
        class Block(nn.Module):
          def setup(self):
            self.attn = nn.MultiHeadDotProductAttention(num_heads=2)
          def __call__(self, x, mask):
            y = self.attn(x, x, mask=mask, deterministic=True)
            return y + nn.MultiHeadDotProductAttention(num_heads=2)(x, x, mask=mask)
     '''),
    # ... and so is one built with dtype= (jVMC: lecun_normal(dtype=tReal)),
    # unless the layer sets param_dtype (today's form)
    ('initializers', '''
        real = jax.nn.initializers.lecun_normal(dtype=np.float64)
        a = nn.Dense(2, kernel_init=jax.nn.initializers.lecun_normal(dtype=np.float64))
        b = nn.Dense(2, kernel_init=real, bias_init=jax.nn.initializers.zeros)
        c = nn.Dense(2, kernel_init=real, param_dtype=np.float64)
     ''', '''
        real = jax.nn.initializers.lecun_normal(dtype=np.float64)
        a = nn.Dense(2, kernel_init=upgraded_layers.legacy_initializer(jax.nn.initializers.lecun_normal(dtype=np.float64)))
        b = nn.Dense(2, kernel_init=upgraded_layers.legacy_initializer(real), bias_init=jax.nn.initializers.zeros)
        c = nn.Dense(2, kernel_init=real, param_dtype=np.float64)
     '''),
]

IMPORTS = {'initializers': 'import functools\n',
           'frozendict': '',
           'early_stopping': 'from flax.training import early_stopping\n'}


def _upgrade(body, extra=''):
  source = HEAD + extra + textwrap.dedent(body)
  new, report = api.upgrade_source(source, 'model.py')
  return new, report


def _body(new):
  """The rewritten code after the imports (and without added imports)."""
  lines = new.splitlines()
  last = max(i for i, l in enumerate(lines)
             if l.startswith(('import ', 'from ')))
  return '\n'.join(lines[last + 1:]).strip() + '\n'


@pytest.mark.parametrize('rule,before,after', CASES,
                         ids=[f'{c[0]}-{i}' for i, c in enumerate(CASES)])
def test_rule(rule, before, after):
  new, report = _upgrade(before, IMPORTS.get(rule, ''))
  assert _body(new) == textwrap.dedent(after).strip() + '\n'
  assert {r['rule'] for r in report.rewritten} == {f'early_linen_{rule}'}
  assert [t['why'] for t in report.left] == (
      [keys.WHY] if '.init(' in before else [])


def test_initializers_module_without_flax():
  source = textwrap.dedent('''\
      import jax

      def cplx_init(rng, shape):
        dtype = jax.numpy.complex64  # a name of its own: the new one differs
        return jax.random.normal(rng, shape, dtype)
  ''')
  new, report = api.upgrade_source(source, 'initializers.py')
  assert 'def cplx_init(rng, shape, unused_param_dtype=None):' in new
  assert [r['rule'] for r in report.rewritten] == ['early_linen_initializers']


def test_shipped_names_are_imported():
  new, report = _upgrade(CASES[3][1] + CASES[5][1])
  assert 'from flaxlegacy.migrate import legacy_cells\n' in new
  assert 'from flaxlegacy.migrate import upgraded_layers\n' in new
  assert '\nimport flax\n' in new
  assert {r['shipped'] for r in report.rewritten if 'shipped' in r} == {
      'flaxlegacy.migrate.legacy_cells.ConvLSTM',
      'flaxlegacy.migrate.upgraded_layers.legacy_initializer'}


def test_early_stopping_tuple():
  new, report = _upgrade('''
      stop = early_stopping.EarlyStopping(patience=2)
      improved, stop = stop.update(loss)
      _, stop = stop.update(loss)
      improved, self.stop = self.stop.update(loss)
  ''', IMPORTS['early_stopping'])
  assert _body(new) == textwrap.dedent('''\
      stop = early_stopping.EarlyStopping(patience=2)
      stop = stop.update(loss)
      improved = stop.has_improved
      stop = stop.update(loss)
      # TODO(flaxlegacy upgrade): EarlyStopping.update returns the new state today (flax 0.3: (has_improved, state)); unpack by hand
      improved, self.stop = self.stop.update(loss)
  ''')
  assert [r['line'] for r in report.rewritten] == [6, 7]


def test_convlstm_import_and_keys_todo():
  source = textwrap.dedent('''\
      import jax
      from flax.linen import ConvLSTM, Dense
      import flax.linen as nn

      params = nn.Dense(2).init(jax.random.PRNGKey(0), x)
  ''')
  # linen without a flax 0.3 pattern (as the upgrade writes it from
  # flax.nn): no TODO about keys
  plain = source.replace('ConvLSTM, ', '')
  assert api.upgrade_source(plain, 'train.py') == (plain, mock.ANY)
  assert not api.upgrade_source(plain, 'train.py')[1].left
  new, report = api.upgrade_source(source, 'train.py')
  assert new.splitlines()[:5] == [
      'import jax',
      '# TODO(flaxlegacy upgrade): flax 0.3 linen derived parameter keys '
      "differently: on today's linen the same seed initialises other numbers "
      '(trained parameters and checkpoints carry over unchanged)',
      'from flax.linen import Dense',
      'import flax.linen as nn',
      'from flaxlegacy.migrate.legacy_cells import ConvLSTM']
  assert report.left == [{'line': 2, 'why': report.left[0]['why']}]
  again, report = api.upgrade_source(new, 'train.py')
  assert again == new and not report.left and not report.rewritten


def test_legacy_flax_nn_files_are_not_touched_by_these_rules():
  source = textwrap.dedent('''\
      from flax import nn

      class M(nn.Module):
        def apply(self, x):
          return nn.Dense(x, 3)
  ''')
  _, report = api.upgrade_source(source, 'm.py')
  assert not any(r['rule'].startswith('early_linen') for r in report.rewritten)
  assert not report.left


RUN = '''
import json, sys
sys.path.insert(0, DIR)
import numpy as np
import program
out = program.main()
print(json.dumps({k: [np.asarray(v).dtype.str, list(np.shape(v)),
                      np.asarray(v).ravel().tolist()]
                  for k, v in out.items()}))
'''


@pytest.mark.slow
def test_upgraded_early_linen_computes_the_same_numbers(
    tmp_path, python_without_flaxlegacy):
  out = tmp_path / 'upgraded'
  status, report = api.upgrade_paths([DATA], out=str(out))
  assert status == 0
  upgraded = (out / 'models.py').read_text()
  assert 'legacy_cells.LSTMCell()' in upgraded
  assert 'def two_arg_init(rng, shape, dtype=None):' in upgraded
  assert flaxlegacy_outside_comments(out) == []
  # (legacy_initializer: stated_dtypes.py's functools.partial(zeros,
  # dtype=...); that file runs under x64 in tests/test_early_linen.py)
  assert sorted(report['shipped'][0]['names']) == [
      'ConvLSTM', 'GRUCell', 'LSTMCell', 'OptimizedLSTMCell',
      'legacy_initializer']
  original = run_python(RUN.replace('DIR', repr(DATA)), env={
      'FLAXLEGACY': 'on', 'FLAXLEGACY_LINEN_KEYS': 'modern',
      'FLAXLEGACY_PRNG': 'modern'})
  rewritten = subprocess.run(
      [python_without_flaxlegacy, '-c', RUN.replace('DIR', repr(str(out)))],
      env=standalone_env.env(), cwd=str(out), capture_output=True, text=True,
      timeout=600)
  assert rewritten.returncode == 0, rewritten.stderr[-3000:]
  want = json.loads(original.stdout.splitlines()[-1])
  got = json.loads(rewritten.stdout.splitlines()[-1])
  assert len(want) == 130 and sorted(got) == sorted(want)
  # the same function on the same parameters, on one machine: bit for bit
  assert [k for k in want if got[k] != want[k]] == []
  assert want['improved0'] == ['|b1', [], [True]]
  # stated_dtypes.py (x64; initializers built with dtype=, wrapped): the
  # same numbers and dtypes, float64 / complex128 parameters as in flax 0.3
  script = test_early_linen.X64.replace('LEGACY', '')
  original = run_python(script.replace('DATA', repr(DATA)), env={
      'FLAXLEGACY': 'on', 'FLAXLEGACY_LINEN_KEYS': 'modern',
      'FLAXLEGACY_PRNG': 'modern'})
  rewritten = subprocess.run(
      [python_without_flaxlegacy, '-c', script.replace('DATA', repr(str(out)))],
      env=standalone_env.env(), cwd=str(out), capture_output=True, text=True,
      timeout=600)
  assert rewritten.returncode == 0, rewritten.stderr[-3000:]
  want = json.loads(original.stdout.splitlines()[-1])
  got = json.loads(rewritten.stdout.splitlines()[-1])
  assert len(want) == 12 and got == want
  assert want['rbm:params/Dense_0/kernel'][0] == '<f8'
  assert want['cpx_dense:params/Dense_0/kernel'][0] == '<c16'


def test_featureless_cell_with_a_legacy_initializer_keyword():
  # jvmc: an early-linen cell whose initializer comes from legacy flax.nn
  # (``flax.nn.linear.default_kernel_init``, the same value in linen): no
  # TODO on it, so the cell rule applies as to any featureless cell.
  source = textwrap.dedent('''\
      import functools
      import flax
      import flax.linen as nn
      import jax.numpy as jnp
      class Cell(nn.Module):
        @nn.compact
        def __call__(self, carry, x):
          init = functools.partial(flax.nn.linear.default_kernel_init,
                                   dtype=jnp.float64)
          return nn.LSTMCell(kernel_init=flax.nn.linear.default_kernel_init)(
              carry, x)
  ''')
  new, report = api.upgrade_source(source, 'cells.py')
  assert not report.left, report.left
  assert ('init = functools.partial(flax.linen.linear.default_kernel_init,'
          in new)
  assert ('return legacy_cells.LSTMCell(kernel_init=flax.linen.linear.'
          'default_kernel_init)(' in new)


def test_same_attrs_in_linen_are_the_same_values():
  # the table behind the rewrite above: each legacy name computes what its
  # linen namesake computes (run under the layer)
  proc = run_python('''
      import jax, numpy as np
      import flax.linen
      from flax import nn
      from flaxlegacy.upgrade.rules import rewriter
      key = jax.random.PRNGKey(3)
      for name in sorted(rewriter.SAME_ATTRS_IN_LINEN):
        legacy, today = nn, flax.linen
        for part in name.split('.'):
          legacy, today = getattr(legacy, part), getattr(today, part)
        a = np.asarray(legacy(key, (5, 7)))
        b = np.asarray(today(key, (5, 7)))
        assert a.shape == (5, 7) and np.array_equal(a, b), name
      print('same', len(rewriter.SAME_ATTRS_IN_LINEN))
  ''', env={'FLAXLEGACY': 'on'})
  assert proc.stdout.split()[-2:] == ['same', '1']


X64_CELLS = textwrap.dedent('''\
    import jax
    from jax import config
    config.update("jax_enable_x64", True)
    import flax.linen as nn
    import jax.numpy as jnp

    def run():
      x = jnp.ones((1, 2), jnp.float64)
      c = nn.LSTMCell.initialize_carry(jax.random.PRNGKey(0), (1,), 3)
      cell = nn.LSTMCell(
          kernel_init=jax.nn.initializers.lecun_normal(dtype=jnp.float64))
      (c2, y), _ = cell.init_with_output(jax.random.PRNGKey(1), c, x)
      return [str(a.dtype) for a in jax.tree_util.tree_leaves((c, c2, y))]
''')


def test_x64_carry_keeps_flax03_dtype_without_flaxlegacy(
    tmp_path, python_without_flaxlegacy):
  # jvmc: under x64, flax 0.3's initialize_carry drew the carry with the
  # initializer's default dtype (float64); today's cell passes param_dtype
  # (float32) and a scan over the cell then refuses the carry.  In a file
  # that turns x64 on, the upgrade calls the initializer as flax 0.3 did.
  src = tmp_path / 'src'
  src.mkdir()
  (src / 'cells.py').write_text(X64_CELLS)
  status, _ = api.upgrade_paths([str(src)], out=str(tmp_path / 'out'))
  assert status == 0
  new = (tmp_path / 'out' / 'cells.py').read_text()
  assert ('carry_init=upgraded_layers.legacy_initializer('
          'jax.nn.initializers.zeros)' in new), new
  script = 'import cells; print(" ".join(cells.run()))'
  original = run_python(script, env={'FLAXLEGACY': 'on',
                                     'PYTHONPATH': str(src)})
  rewritten = subprocess.run(
      [python_without_flaxlegacy, '-c', script], env=standalone_env.env(),
      cwd=str(tmp_path / 'out'), capture_output=True, text=True, timeout=300)
  assert rewritten.returncode == 0, rewritten.stderr[-3000:]
  want = original.stdout.splitlines()[-1].split()
  assert want == ['float64'] * 5  # carry (c, h), new carry, output
  assert rewritten.stdout.splitlines()[-1].split() == want


XLA_WHY = ('jax.lib.xla_client was removed from JAX; today: jaxlib.xla_client '
           '(Device, Client, Shape, ...); jax.Device for type annotations')


def test_removed_jax_modules():
  # flaxformer's sharded_jit.PartitionSpec has a home today; xla_client
  # used both for a name only the stand-in has (PaddingType) and one only
  # jaxlib has (Device) has none: a TODO, at the import and at a
  # spelled-out chain.
  source = textwrap.dedent('''\
      import jax
      from jax.lib import xla_client
      from jax.interpreters import sharded_jit
      xc = jax.lib.xla_client
      spec = sharded_jit.PartitionSpec('data', None)
      both = (xc.PaddingType.SAME, xla_client.Device)
  ''')
  new, report = api.upgrade_source(source, 'layers.py')
  assert new == textwrap.dedent(f'''\
      import jax
      # TODO(flaxlegacy upgrade): {XLA_WHY}
      from jax.lib import xla_client
      from jax import sharding as sharded_jit
      # TODO(flaxlegacy upgrade): {XLA_WHY}
      xc = jax.lib.xla_client
      spec = sharded_jit.PartitionSpec('data', None)
      both = (xc.PaddingType.SAME, xla_client.Device)
  ''')
  assert sorted(t['line'] for t in report.left) == [2, 4]


@pytest.mark.parametrize('uses, want', [
    # only the stand-in's own names: the stand-in, shipped beside the code
    ('xc.PaddingType.SAME', 'from flaxlegacy.compat import xla_client'),
    ('jax.lib.xla_client.PaddingType.VALID',
     'from flaxlegacy.compat import xla_client'),
    # only names today's jaxlib.xla_client has
    ('xla_client.Device', 'from jaxlib import xla_client'),
    # a private name, one neither has, the module handed on: TODO
    ('xc._xla', None),
    ('xc.XlaBuilder', None),
    ('print(xc)', None),
])
def test_xla_client_served_by_what_the_file_uses(uses, want):
  source = textwrap.dedent(f'''\
      import jax
      from jax.lib import xla_client
      def f():
        xc = jax.lib.xla_client
        return {uses}
  ''')
  new, report = api.upgrade_source(source, 'layers.py')
  if want is None:
    assert [t['why'] for t in report.left] == [XLA_WHY] * 2
    assert 'from jax.lib import xla_client' in new
  else:
    assert not report.left
    assert new.splitlines()[1] == want
    assert '  xc = xla_client\n' in new
    assert 'jax.lib' not in new


PADS = textwrap.dedent('''\
    import jax
    import jax.numpy as jnp

    def pads(in_shape, window_shape, strides, padding):
      xc = jax.lib.xla_client
      if isinstance(padding, str):
        mapping = {'VALID': xc.PaddingType.VALID, 'SAME': xc.PaddingType.SAME}
        padding = mapping[padding.upper()]
      if padding == xc.PaddingType.SAME:
        out = -(-in_shape // strides)
        size = jnp.maximum((out - 1) * strides + window_shape - in_shape, 0)
        return jnp.stack([size // 2, size - size // 2], axis=1)
      elif padding == xc.PaddingType.VALID:
        return jnp.zeros((len(window_shape), 2), jnp.int32)
      raise TypeError(padding)
''')
RUN_PADS = ('import json, jax.numpy as jnp, pads as p; print(json.dumps(['
            'p.pads(jnp.array(s), jnp.array([3, 2]), jnp.array([2, 1]), m)'
            '.tolist() for s in ([7, 5], [8, 4]) for m in (\'same\', \'VALID\')]))')


def test_xla_client_padding_type_runs_without_flaxlegacy(
    tmp_path, python_without_flaxlegacy):
  # scenic's masked layers map 'SAME' / 'VALID' to xla_client.PaddingType:
  # upgraded, the enum comes from the helper copy, and the padding numbers
  # are those of the original under the layer.
  src = tmp_path / 'src'
  src.mkdir()
  (src / 'pads.py').write_text(PADS)
  status, report = api.upgrade_paths([str(src)], out=str(tmp_path / 'out'))
  assert status == 0 and report['summary']['todos'] == 0, report
  assert sorted(report['shipped'][0]['names']) == ['PaddingType']
  assert flaxlegacy_outside_comments(tmp_path / 'out') == []
  helpers = (tmp_path / 'out' / 'legacy_helpers.py').read_text()
  assert 'class PaddingType(enum.Enum)' in helpers
  assert '__getattr__' not in helpers
  original = run_python(RUN_PADS, env={'FLAXLEGACY': 'on',
                                       'PYTHONPATH': str(src)})
  rewritten = subprocess.run(
      [python_without_flaxlegacy, '-c', RUN_PADS], env=standalone_env.env(),
      cwd=str(tmp_path / 'out'), capture_output=True, text=True, timeout=300)
  assert rewritten.returncode == 0, rewritten.stderr[-3000:]
  want = json.loads(original.stdout.splitlines()[-1])
  assert json.loads(rewritten.stdout.splitlines()[-1]) == want
  assert want[0] == [[1, 1], [0, 1]]  # SAME on (7, 5), window (3, 2)


# -- FrozenDict.pop on an init's variables; JAX call forms ------------------

POP_WHY = ('x.pop(k) unpacked into two names: flax 0.3\'s FrozenDict.pop '
           'returned (rest, value), a dict\'s pop returns the value; the '
           'upgrade cannot tell which x holds (if linen variables: '
           'flax.core.pop(x, k))')


def test_pop_of_known_variables_and_todo_where_unknown():
  new, report = _upgrade('''
      a_rest, a = model.init(rng, x).pop('params')
      b_rest, b = nn.init(fn, model)(rng).pop('params')
      c_rest, c = jax.jit(model.init)(rng, x).pop('params')
      y, state = model.apply(v, x, mutable=['batch_stats'])
      d_rest, d = state.pop('batch_stats')
      _, v2 = model.init_with_output(rng, x)
      cache, rest = v2.pop('cache')
      e_rest, e = cache.pop('params')
      def f(variables, d):
        rest, params = variables.pop('params')
        key, value = d.pop('pair')
        value = d.pop('key')
        return params
      w = model.init(rng, x)
      w = {'params': w}
      g_rest, g = w.pop('params')
  ''')
  assert _body(new) == textwrap.dedent('''\
      a_rest, a = flax.core.pop(model.init(rng, x), 'params')
      b_rest, b = flax.core.pop(nn.init(fn, model)(rng), 'params')
      c_rest, c = flax.core.pop(jax.jit(model.init)(rng, x), 'params')
      y, state = model.apply(v, x, mutable=['batch_stats'])
      d_rest, d = flax.core.pop(state, 'batch_stats')
      _, v2 = model.init_with_output(rng, x)
      cache, rest = flax.core.pop(v2, 'cache')
      e_rest, e = flax.core.pop(cache, 'params')
      def f(variables, d):
        # TODO(flaxlegacy upgrade): POP
        rest, params = variables.pop('params')
        key, value = d.pop('pair')
        value = d.pop('key')
        return params
      w = model.init(rng, x)
      w = {'params': w}
      # TODO(flaxlegacy upgrade): POP
      g_rest, g = w.pop('params')
  ''').replace('POP', POP_WHY)
  assert [r['line'] for r in report.rewritten] == [4, 5, 6, 8, 10, 11]
  assert [t['line'] for t in report.left if t['why'] == POP_WHY] == [
      13, 19]


SCENIC_TEST = '''\
import jax
import jax.numpy as jnp
from models import build

def test_model():
  model = build()
  init_model_state, init_params = model.flax_model.init(
      jax.random.PRNGKey(0), jnp.ones((2, 3)), train=False).pop('params')
  key, value = {'pair': (1, 2)}.pop('pair')
  rest, p = some_dict.pop('params')
  return init_model_state, init_params
'''


def test_pop_in_a_file_importing_only_jax():
  # scenic's model tests: the module comes from a codebase file, the file
  # imports no flax; a pop of a linen collection on an unknown value: TODO
  new, report = api.upgrade_source(SCENIC_TEST, 'test_models.py')
  assert new == textwrap.dedent('''\
      import jax
      import jax.numpy as jnp
      from models import build
      import flax

      def test_model():
        model = build()
        # TODO(flaxlegacy upgrade): KEYS
        init_model_state, init_params = flax.core.pop(model.flax_model.init(
            jax.random.PRNGKey(0), jnp.ones((2, 3)), train=False), 'params')
        key, value = {'pair': (1, 2)}.pop('pair')
        # TODO(flaxlegacy upgrade): POP
        rest, p = some_dict.pop('params')
        return init_model_state, init_params
  ''').replace('KEYS', keys.WHY).replace('POP', POP_WHY)
  assert [r['rule'] for r in report.rewritten] == ['early_linen_frozendict']
  assert sorted(t['why'] for t in report.left) == sorted([keys.WHY, POP_WHY])
  again, report = api.upgrade_source(new, 'test_models.py')
  assert again == new and not report.rewritten


def test_remat_concrete_and_unsigned_literals():
  new, report = _upgrade('''
      f1 = jax.remat(g, concrete=False)
      f2 = jax.checkpoint(g, concrete=False, prevent_cse=False)
      f3 = functools.partial(jax.remat, concrete=concrete, policy=policy)
      f4 = jax.remat(g, concrete=True)
      f5 = nn.remat(Block, concrete=False)
      f6 = transforms.remat(Block, concrete=False)
      i = jnp.array(-1, dtype=jnp.uint32)
      j = jnp.asarray([-1, 3, -2], jnp.uint8)
      k = jnp.array(-1, dtype=jnp.int32)
      m = jnp.array(255, dtype='int8')
      n = np.uint16(-1)
      o = jnp.array(x, dtype=jnp.uint32)
      q = jnp.array(-1, dtype=jnp.uint64)
  ''', 'import functools\nimport numpy as np\nimport jax.numpy as jnp\n')
  todo = '# TODO(flaxlegacy upgrade): '
  assert _body(new) == textwrap.dedent(f'''\
      f1 = jax.remat(g)
      f2 = jax.checkpoint(g, prevent_cse=False)
      {todo}{jax_calls.CONCRETE_VALUE}
      f3 = functools.partial(jax.remat, **({{'concrete': concrete}} if concrete else {{}}), policy=policy)
      {todo}{jax_calls.CONCRETE_TRUE}
      f4 = jax.remat(g, concrete=True)
      f5 = nn.remat(Block)
      f6 = transforms.remat(Block, concrete=False)
      i = jnp.array(4294967295, dtype=jnp.uint32)
      j = jnp.asarray([255, 3, 254], jnp.uint8)
      k = jnp.array(-1, dtype=jnp.int32)
      m = jnp.array(-1, dtype='int8')
      n = np.uint16(65535)
      o = jnp.array(x, dtype=jnp.uint32)
      {todo}{jax_calls.WIDE}
      q = jnp.array(-1, dtype=jnp.uint64)
  ''')
  assert {r['rule'] for r in report.rewritten} == {'early_linen_jax_calls'}
  # jax_calls alone is no flax 0.3 pattern: no TODO about keys
  assert sorted(t['why'] for t in report.left) == sorted(
      [jax_calls.CONCRETE_VALUE, jax_calls.CONCRETE_TRUE, jax_calls.WIDE])


NUMBERS = '''
import functools, json
import jax, jax.numpy as jnp, numpy as np
import flax.linen as nn

class M(nn.Module):
  @nn.compact
  def __call__(self, x):
    x = nn.Dense(3)(x)
    return nn.BatchNorm(use_running_average=False)(x)

x = jnp.arange(8.0).reshape(2, 4)
variables = M().init(jax.random.PRNGKey(0), x)
state, params = variables.pop('params')
def g(w):
  return jnp.sin(w) * w
concrete = False
f = functools.partial(jax.remat, concrete=concrete)(g)
h = jax.remat(g, concrete=False)
i = jnp.array(-1, dtype=jnp.uint32)
print(json.dumps({
    'params': params == variables['params'],
    'state': sorted(state), 'rest_has_params': 'params' in state,
    'grad': [float(jax.grad(f)(1.5)), float(jax.grad(h)(1.5)),
             float(jax.grad(g)(1.5))],
    'index': [int(i), int(i + 1), str(i.dtype)]}))
'''


def test_upgraded_pop_remat_and_literal_run_on_todays_jax(
    tmp_path, python_without_flaxlegacy):
  new, report = api.upgrade_source(NUMBERS, 'program.py')
  assert 'flax.core.pop(variables, ' in new and '4294967295' in new
  path = tmp_path / 'program.py'  # (not numbers.py: the stdlib's)
  path.write_text(new)
  out = subprocess.run([python_without_flaxlegacy, str(path)],
                       env=standalone_env.env(), cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  got = json.loads(out.stdout.splitlines()[-1])
  # the same function, three ways, on one machine: equal
  assert got['grad'][0] == got['grad'][1] == got['grad'][2]
  assert got['params'] is True and got['state'] == ['batch_stats']
  assert got['index'] == [4294967295, 0, 'uint32']


def test_keys_todo_reaches_a_jax_file_initialising_a_codebase_module(
    tmp_path):
  # flaxformer's relative_position_biases_test: imports only JAX, pins the
  # numbers of a codebase module's init; the codebase shows a flax 0.3
  # pattern elsewhere (``.unfreeze()``), so the test gets the keys TODO
  src = tmp_path / 'src'
  (src / 'pkg').mkdir(parents=True)
  (src / 'pkg' / '__init__.py').write_text('')
  (src / 'pkg' / 'biases.py').write_text(textwrap.dedent('''\
      import flax.linen as nn

      class Biases(nn.Module):
        @nn.compact
        def __call__(self, n):
          return self.param('b', nn.initializers.normal(), (n,))
  '''))
  (src / 'pkg' / 'train.py').write_text(textwrap.dedent('''\
      import flax

      def thaw(variables):
        return variables.unfreeze()
  '''))
  test = textwrap.dedent('''\
      import jax
      from pkg import biases

      def test_values():
        out, _ = biases.Biases().init_with_output(jax.random.PRNGKey(0), 3)
        assert abs(out[0] - 0.55764728) < 1e-5
  ''')
  (src / 'pkg' / 'biases_test.py').write_text(test)
  # ``.init(`` only in a docstring: no TODO
  doc = 'import jax\nfrom pkg import biases\n"""Use biases.Biases().init(rng).\"""\n'
  (src / 'pkg' / 'doc.py').write_text(doc)
  status, report = api.upgrade_paths([str(src)], out=str(tmp_path / 'a'))
  assert status == 0
  assert (tmp_path / 'a' / 'pkg' / 'doc.py').read_text() == doc
  new = (tmp_path / 'a' / 'pkg' / 'biases_test.py').read_text()
  assert new == test.replace(
      'from pkg', f'# TODO(flaxlegacy upgrade): {keys.WHY}\nfrom pkg')
  assert report['files']['pkg/biases_test.py']['left'] == [
      {'line': 2, 'why': keys.WHY}]
  # no flax 0.3 pattern anywhere (linen as the upgrade writes it): none
  (src / 'pkg' / 'train.py').unlink()
  status, report = api.upgrade_paths([str(src)], out=str(tmp_path / 'b'))
  assert (tmp_path / 'b' / 'pkg' / 'biases_test.py').read_text() == test
  assert not report['files']['pkg/biases_test.py']['left']


def test_legacy_flax_nn_file_gets_no_pop_or_keys_rules():
  # a legacy flax.nn file imports no flax of today: the JAX-file rules
  # (an initializer's dtype) apply, not pop / keys (its init is legacy's)
  source = textwrap.dedent('''\
      import jax
      from flax import nn

      def my_init(rng, shape):
        return jax.random.normal(rng, shape)

      rest, p = things.pop('params')
      y = jax.remat(f, concrete=False)
  ''')
  new, report = api.upgrade_source(source, 'legacy.py')
  assert "rest, p = things.pop('params')" in new
  assert 'y = jax.remat(f)' in new
  assert 'def my_init(rng, shape, dtype=None)' in new
  assert not report.left


SCALAR_CASTS = '''\
import json
import jax
import jax.numpy as jnp
from jax import random

def shuffle_seed(rng):
  return int(jax.random.randint(rng, [1], 0, 1000))

rng = jax.random.PRNGKey(3)
a = shuffle_seed(rng)
b = float(random.uniform(rng, shape=(1, 1)))
c = int(jnp.zeros(1, jnp.int32))
d = float(jnp.array([[2.5]]))
e = int(jax.random.randint(rng, (), 0, 1000))
f = int(jnp.sum(jnp.ones(3)))
g = float(jax.random.normal(rng, [2]) [0])
print(json.dumps({'a': a, 'b': b, 'c': c, 'd': d, 'e': e, 'f': f,
                  'same': [a == int(jax.random.randint(rng, [1], 0, 1000)[0]),
                           b == float(random.uniform(rng, (1, 1))[0, 0])]}))
'''


def test_scalar_cast_of_a_one_element_array(tmp_path,
                                            python_without_flaxlegacy):
  # init2winit's small_image_datasets: ``int()`` of a one-element (not 0-d)
  # array, which today's JAX refuses (``Only scalar arrays can be
  # converted``); in a file importing only JAX
  new, report = api.upgrade_source(SCALAR_CASTS, 'data.py')
  lines = new.splitlines()
  assert '  return int(jax.random.randint(rng, [1], 0, 1000).item())' in lines
  assert 'b = float(random.uniform(rng, shape=(1, 1)).item())' in lines
  assert 'c = int(jnp.zeros(1, jnp.int32).item())' in lines
  assert 'd = float(jnp.array([[2.5]]).item())' in lines
  # a 0-d shape, an unknown value, an index: left as written
  assert 'e = int(jax.random.randint(rng, (), 0, 1000))' in lines
  assert 'f = int(jnp.sum(jnp.ones(3)))' in lines
  assert 'g = float(jax.random.normal(rng, [2]) [0])' in lines
  assert [r['rule'] for r in report.rewritten] == ['early_linen_jax_calls'] * 4
  assert not report.left
  again, _ = api.upgrade_source(new, 'data.py')
  assert again == new
  path = tmp_path / 'data.py'
  path.write_text(new)
  out = subprocess.run([python_without_flaxlegacy, str(path)],
                       env=standalone_env.env(), cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  got = json.loads(out.stdout.splitlines()[-1])
  assert got['c'] == 0 and got['d'] == 2.5 and got['same'] == [True, True]
  # as written, today's JAX refuses the cast
  path.write_text(SCALAR_CASTS)
  out = subprocess.run([python_without_flaxlegacy, str(path)],
                       env=standalone_env.env(), cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=600)
  assert out.returncode != 0
  assert 'Only scalar arrays can be converted' in out.stderr
