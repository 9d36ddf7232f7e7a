"""flaxlegacy upgrade --names linen: linen's own auto-names, the rename map
in upgrade.json, ``names.rename_params`` (plain flax, FLAXLEGACY=off),
``--verify`` through the map, and ``flaxlegacy convert --rename-map``.

Numbers: the verification compares at rtol 1e-5 (verify.py); the measured
max relative error is 0.0 (same linen computations on both sides, CPU).
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from flaxlegacy.migrate import names
from flaxlegacy.upgrade import api
from flaxlegacy.upgrade import verify

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Auto-named Conv, Conv, Dense, a user class twice (once auto-named, once
# named ``block_1`` by hand, the form convert_pre_linen renumbers), Dense;
# the user class has auto-named Dense, BatchNorm (state), Dense.
LEGACY = '''\
import jax.numpy as jnp
from flax import nn


class Block(nn.Module):

  def apply(self, x, features):
    x = nn.Dense(x, features)
    x = nn.BatchNorm(x, momentum=0.9)
    x = nn.relu(x)
    return nn.Dense(x, features)


class Net(nn.Module):

  def apply(self, x, features=4):
    x = nn.Conv(x, features, (3, 3))
    x = nn.Conv(x, features, (3, 3))
    x = jnp.mean(x, axis=(1, 2))
    x = nn.Dense(x, features)
    x = Block(x, features)
    x = Block(x, features, name='block_1')
    x = nn.Dense(x, 3)
    return x


def init_net():
  return Net.init_by_shape(None, [((2, 6, 6, 3), jnp.float32)])
'''

BLOCK_MAP = {'Dense_0': 'Dense_0', 'BatchNorm_1': 'BatchNorm_0',
             'Dense_2': 'Dense_1'}
NET_MAP = {'Conv_0': 'Conv_0', 'Conv_1': 'Conv_1', 'Dense_2': 'Dense_0',
           'Block_3': 'Block_0', 'Dense_4': 'Dense_1', 'block_1': 'block_1'}


def _children(entry):
  return {k: v['name'] for k, v in entry['children'].items()}


def _src(tmp_path, code=LEGACY):
  src = tmp_path / 'src'
  src.mkdir()
  (src / 'model.py').write_text(code)
  return src


@pytest.fixture(scope='module')
def upgraded(tmp_path_factory):
  tmp = tmp_path_factory.mktemp('linen_names')
  src = _src(tmp)
  out = tmp / 'out'
  status, report = api.upgrade_paths([str(src)], out=str(out), names='linen')
  assert status == 0
  return src, out, report


def test_source_has_no_added_names(upgraded):
  _, out, _ = upgraded
  code = (out / 'model.py').read_text()
  assert code.count('name=') == 1, code
  assert "Block(features=self.features, name='block_1')(x)" in code
  assert 'x = nn.Dense(self.features)(x)' in code
  assert 'return nn.Dense(self.features)(x)' in code
  assert 'x = Block(features=self.features)(x)' in code
  assert 'legacy_autoname' not in code
  # the default keeps legacy's names, as before
  legacy_code, rep = api.upgrade_source(LEGACY, 'model.py')
  for name in ('Dense_2', 'Block_3', 'Dense_4', 'BatchNorm_1'):
    assert f"name='{name}'" in legacy_code
  assert rep.renames == []
  assert api.upgrade_source(LEGACY, 'model.py', names='legacy')[0] == (
      legacy_code)


def test_rename_map_in_report(upgraded):
  _, out, report = upgraded
  on_disk = json.loads((out / 'upgrade.json').read_text())
  assert on_disk['names'] == 'linen'
  assert on_disk['rename_map'] == json.loads(json.dumps(report['rename_map']))
  rmap = report['rename_map']
  assert sorted(rmap) == ['model.py:Block', 'model.py:Net']
  assert _children(rmap['model.py:Block']) == BLOCK_MAP
  assert _children(rmap['model.py:Net']) == NET_MAP
  classes = {k: v['class'] for k, v in rmap['model.py:Net']['children'].items()}
  assert classes == {'Conv_0': None, 'Conv_1': None, 'Dense_2': None,
                     'Dense_4': None, 'Block_3': 'model.py:Block',
                     'block_1': 'model.py:Block'}
  for e in rmap.values():
    assert e['complete'] and e['legacy_names'] is None and e['kept'] == []


def _tree(**blocks):
  leaf = {'kernel': [3], 'bias': [3]}
  block = {'Dense_0': leaf, 'BatchNorm_1': {'scale': [3], 'bias': [3]},
           'Dense_2': leaf}
  tree = {'Conv_0': leaf, 'Conv_1': leaf, 'Dense_2': leaf, 'Block_3': block,
          'block_1': block, 'Dense_4': leaf}
  tree.update(blocks)
  return tree


def test_rename_params_keeps_explicit_names(upgraded):
  _, out, _ = upgraded
  renamed = names.rename_params(_tree(), str(out / 'upgrade.json'), 'Net')
  assert sorted(renamed) == sorted(NET_MAP.values())
  assert sorted(renamed['Block_0']) == ['BatchNorm_0', 'Dense_0', 'Dense_1']
  assert sorted(renamed['block_1']) == ['BatchNorm_0', 'Dense_0', 'Dense_1']
  assert renamed['Dense_1'] is _tree()['Dense_4'] or renamed['Dense_1'] == {
      'kernel': [3], 'bias': [3]}
  # convert_pre_linen renumbers the hand-written name; the map does not
  assert 'block_0' in names.linen_params(_tree())
  # the directory and the file's key work as well
  assert names.rename_params(_tree(), str(out), 'model.py:Net') == renamed
  # batch statistics: only the submodules with state appear
  stats = {'Block_3': {'BatchNorm_1': {'mean': [3], 'var': [3]}}}
  assert names.rename_params(stats, str(out), 'Net') == {
      'Block_0': {'BatchNorm_0': {'mean': [3], 'var': [3]}}}


@pytest.mark.parametrize('tree,root,message', [
    (_tree(Dense_9={'kernel': [3]}), 'Net',
     "'Dense_9' does not fit the rename map: 'Dense_9' is neither a "
     'submodule nor a variable of model.py:Net'),
    (_tree(block_1={'Dense_0': {}, 'Conv_7': {}}), 'Net',
     "'block_1/Conv_7' does not fit the rename map"),
    (_tree(Block_3=[1, 2]), 'Net',
     'rename_params: Block_3: expected the submodules and variables of '
     'model.py:Block (a dict), got a list'),
    ({'Dense_0': {}, 'Dense_2': {}}, 'Block', "'Dense_0' and 'Dense_2'"),
    (_tree(), 'Missing', "no upgraded class 'Missing'"),
])
def test_rename_params_errors(upgraded, tree, root, message):
  _, out, report = upgraded
  if root == 'Block':  # two keys onto one name: a map made by hand
    rmap = json.loads(json.dumps(report['rename_map']))
    rmap['model.py:Block']['children']['Dense_0']['name'] = 'Dense_1'
    with pytest.raises(ValueError, match='would both be renamed'):
      names.rename_params(tree, rmap, root)
    return
  with pytest.raises(ValueError) as e:
    names.rename_params(tree, str(out), root)
  assert message in str(e.value)


def test_rename_map_needs_linen_upgrade(tmp_path):
  src = _src(tmp_path)
  out = tmp_path / 'out'
  api.upgrade_paths([str(src)], out=str(out))
  with pytest.raises(ValueError, match='without --names linen'):
    names.rename_params(_tree(), str(out), 'Net')
  with pytest.raises(ValueError, match=r"names='bogus'"):
    api.upgrade_source(LEGACY, names='bogus')


def test_cli_names_linen_needs_out(tmp_path):
  src = _src(tmp_path)
  p = subprocess.run(
      [sys.executable, '-m', 'flaxlegacy', 'upgrade', str(src), '--in-place',
       '--names', 'linen'], capture_output=True, text=True, cwd=ROOT,
      env=dict(os.environ, PYTHONPATH=ROOT), check=False)
  assert p.returncode == 2
  assert '--names linen needs --out or --diff' in p.stderr
  assert (src / 'model.py').read_text() == LEGACY


def _python(code, off, cwd, *args):
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS='cpu')
  if off:
    env['FLAXLEGACY'] = 'off'
  p = subprocess.run([sys.executable, '-c', textwrap.dedent(code)] +
                     list(args),
                     capture_output=True, text=True, cwd=cwd, env=env,
                     check=False)
  assert p.returncode == 0, p.stderr[-3000:]
  return json.loads(p.stdout.strip().splitlines()[-1])


def test_upgraded_tree_is_the_renamed_legacy_tree(upgraded):
  src, out, _ = upgraded
  legacy = _python('''
      import json, jax, jax.numpy as jnp
      import flaxlegacy
      flaxlegacy.activate()
      from flax import nn
      from flaxlegacy.migrate import names
      import model
      with nn.stateful() as state:
        _, params = model.Net.init_by_shape(
            jax.random.PRNGKey(0), [((2, 6, 6, 3), jnp.float32)])
      shapes = lambda t: jax.tree_util.tree_map(lambda a: list(a.shape), t)
      print(json.dumps({'params': shapes(params), 'batch_stats': shapes(
          names.batch_stats_from_collection(state))}))
      ''', False, str(src))
  linen = _python('''
      import json, sys, jax, jax.numpy as jnp
      from flaxlegacy.migrate import names
      import model
      legacy = json.loads(sys.argv[1])
      variables = model.Net().init(jax.random.PRNGKey(0),
                                   jnp.ones((2, 6, 6, 3)))
      shapes = lambda t: jax.tree_util.tree_map(lambda a: list(a.shape), t)
      print(json.dumps({
          'upgraded': {k: shapes(dict(v)) for k, v in variables.items()},
          'renamed': {k: names.rename_params(v, 'upgrade.json', 'Net')
                      for k, v in legacy.items()},
          'legacy_loaded': sorted(m for m in sys.modules if m.startswith(
              ('flax.nn', 'flaxlegacy.nn', 'flaxlegacy.optim')))}))
      ''', True, str(out), json.dumps(legacy))
  assert linen['legacy_loaded'] == []
  assert linen['upgraded']['params'] == linen['renamed']['params']
  assert linen['upgraded']['batch_stats'] == linen['renamed']['batch_stats']
  assert sorted(linen['upgraded']['params']) == sorted(NET_MAP.values())
  assert sorted(legacy['params']) == sorted(NET_MAP)  # the names differed


@pytest.mark.slow
def test_verify_through_the_rename_map(upgraded):
  src, out, report = upgraded
  [m] = [m for m in report['modules'] if m['class'] == 'Net']
  kw = dict(inputs=[((2, 6, 6, 3), 'float32')], hyper={'features': 5},
            fields=m['fields'], call=m['call'], var_kw=m['var_kw'])
  r = verify.verify_module(str(src / 'model.py'), str(out / 'model.py'),
                           'Net', rename_map=str(out / 'upgrade.json'), **kw)
  assert r['status'] == 'ok', r
  assert r['tree'] and r['match'] and r['max_rel_err'] <= 1e-5
  # without the map the trees differ: the check is not vacuous
  r = verify.verify_module(str(src / 'model.py'), str(out / 'model.py'),
                           'Net', **kw)
  assert r['status'] in ('mismatch', 'error') and not r.get('tree'), r


@pytest.mark.slow
def test_cli_names_linen_verify(tmp_path):
  src = _src(tmp_path)
  out = tmp_path / 'out'
  p = subprocess.run(
      [sys.executable, '-m', 'flaxlegacy', 'upgrade', str(src), '--out',
       str(out), '--names', 'linen', '--verify'], capture_output=True,
      text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), check=False)
  assert p.returncode == 0, p.stderr
  assert 'verify model.py:Net: ok' in p.stderr
  report = json.loads((out / 'upgrade.json').read_text())
  assert _children(report['rename_map']['model.py:Net']) == NET_MAP
  p = subprocess.run(
      [sys.executable, '-m', 'flaxlegacy', 'upgrade', str(src), '--out',
       str(tmp_path / 'o2'), '--names', 'bogus'], capture_output=True,
      text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), check=False)
  assert p.returncode == 2 and "invalid choice: 'bogus'" in p.stderr


# --- where the legacy names stay (and the report says so) -------------------

KEPT = '''\
from flax import nn


class Loop(nn.Module):

  def apply(self, x, n):
    for _ in range(n):
      x = nn.Dense(x, 3)
    return nn.Conv(x, 3, (1, 1))


class Nested(nn.Module):

  def apply(self, x):
    return nn.Dense(nn.Dense(x, 5), 2)


class Clash(nn.Module):

  def apply(self, x):
    x = nn.Conv(x, 3, (1, 1))
    x = nn.Dense(x, 3)
    return nn.Dense(x, 3, name='Dense_0')


class Shared(nn.Module):

  def apply(self, x):
    x = nn.Conv(x, 3, (1, 1))
    dense = nn.Dense.shared(features=3)
    x = nn.Dense(dense(dense(x)), 3)
    return x


class Fixed(nn.Module):

  def apply(self, x):
    for _ in range(2):
      x = nn.Conv(x, 3, (1, 1))
    return nn.Dense(x, 3)


class Sub(Fixed):
  pass


class Top(nn.Module):

  def apply(self, x):
    x = nn.Dense(x, 3)
    for i in range(2):
      x = Fixed(x, name=f'fixed_{i}')
    return Sub(x)
'''


def test_legacy_names_kept_where_linen_cannot_be_known():
  code, rep = api.upgrade_source(KEPT, 'kept.py', names='linen')
  by = {e['class']: e for e in rep.renames}
  assert 'loop or a condition' in by['Loop']['legacy_names']
  assert 'legacy_autoname' in code
  assert 'inside the arguments' in by['Nested']['legacy_names']
  default, _ = api.upgrade_source(KEPT, 'kept.py')
  # legacy numbers the inner call first, linen constructs the outer first:
  # both get their legacy names written, in either mode
  nested = ("return nn.Dense(2, name='Dense_1')(nn.Dense(5, "
            "name='Dense_0')(x))")
  assert nested in code and nested in default  # as without --names linen
  assert "'Dense_0' is also written" in by['Clash']['legacy_names']
  assert "nn.Dense(3, name='Dense_1')(x)" in code
  # one name kept, the rest linen's: the digit of X.shared() stays
  assert by['Shared']['legacy_names'] is None
  assert by['Shared']['kept'] == [
      {'name': '1', 'why': 'X.shared() without a name (legacy: a bare '
                           'digit)'}]
  assert _children(by['Shared']) == {'Conv_0': 'Conv_0', '1': '1',
                                     'Dense_2': 'Dense_0'}
  assert "nn.Dense(features=3, name='1')" in code
  # a loop of literal length is planned: each run gets its linen name
  assert by['Fixed']['legacy_names'] is None
  assert _children(by['Fixed']) == {'Conv_0': 'Conv_0', 'Conv_1': 'Conv_1',
                                    'Dense_2': 'Dense_0'}
  assert 'return nn.Dense(3)(x)' in code
  # a subclass runs its base's __call__; f-string names keep their class
  assert by['Sub'] == {'file': 'kept.py', 'class': 'Sub',
                       'inherits': 'kept.py:Fixed'}
  assert by['Top']['name_patterns'] == [{'regex': 'fixed_(.+)',
                                         'class': 'kept.py:Fixed'}]
  assert _children(by['Top']) == {'Dense_0': 'Dense_0', 'Sub_1': 'Sub_0'}
  fixed = {'Conv_0': {}, 'Conv_1': {}, 'Dense_2': {'kernel': 1}}
  renamed = names.rename_params(
      {'Dense_0': {}, 'fixed_0': fixed, 'fixed_1': fixed, 'Sub_1': fixed},
      {f'kept.py:{k}': v for k, v in by.items()}, 'Top')
  linen_fixed = {'Conv_0': {}, 'Conv_1': {}, 'Dense_0': {'kernel': 1}}
  assert renamed == {'Dense_0': {}, 'fixed_0': linen_fixed,
                     'fixed_1': linen_fixed, 'Sub_0': linen_fixed}
  from flaxlegacy.upgrade import report as report_lib  # pylint: disable=g-import-not-at-top
  text = report_lib.summary_text({
      'summary': {'files': 1, 'files_changed': 1, 'modules_rewritten': 7,
                  'rewrites': 0, 'todos': 0, 'syntax_errors': []},
      'files': {}, 'rename_map': {f'kept.py:{k}': v for k, v in by.items()}})
  assert 'legacy names kept in kept.py:Loop: the number of submodules' in text
  assert "legacy name kept in kept.py:Shared: 1 (X.shared()" in text


@pytest.mark.slow
def test_kept_names_verify(tmp_path):
  src = _src(tmp_path, KEPT)
  out = tmp_path / 'out'
  status, report = api.upgrade_paths([str(src)], out=str(out), names='linen')
  assert status == 0
  mods = {m['class']: m for m in report['modules']}
  checks = [dict(class_name=c, inputs=[((2, 4, 4, 3), 'float32')],
                 hyper=h, fields=mods[c]['fields'], call=mods[c]['call'],
                 var_kw=mods[c]['var_kw'])
            for c, h in [('Loop', {'n': 3}), ('Clash', {}), ('Shared', {}),
                         ('Fixed', {}), ('Top', {})]]
  results = verify.verify_modules(str(src / 'model.py'), str(out / 'model.py'),
                                  checks, rename_map=report)
  for c, r in zip(checks, results):
    assert r['status'] == 'ok', (c['class_name'], r)


# --- flaxlegacy convert --rename-map ------------------------------------------


@pytest.mark.slow
def test_convert_rename_map_loads_into_upgraded_module(upgraded, tmp_path):
  src, out, _ = upgraded
  ckpt = tmp_path / 'ckpt'
  _python('''
      import json, sys, jax, jax.numpy as jnp, numpy as np
      import flaxlegacy
      flaxlegacy.activate()
      from flax import nn, optim
      from flax.training import checkpoints
      import model
      x = np.random.RandomState(0).normal(size=(2, 6, 6, 3)).astype('float32')
      with nn.stateful() as state:
        _, params = model.Net.init(jax.random.PRNGKey(0), x)
      opt = optim.Momentum(learning_rate=0.1, beta=0.9).create(
          nn.Model(model.Net, params))
      def loss(m):
        with nn.stateful(state):
          return jnp.sum(m(x) ** 2)
      opt = opt.apply_gradient(jax.grad(loss)(opt.target))
      with nn.stateful(state) as new_state:
        y = opt.target(x)
      checkpoints.save_checkpoint(sys.argv[1], {'optimizer': opt,
                                                'model_state': new_state}, 1)
      mom = opt.state.param_states.params['Dense_2']['kernel'].momentum
      np.savez(sys.argv[1] + '.npz', x=x, y=y, mom=mom,
               mean=new_state['/block_1/BatchNorm_1']['mean'])
      print('{}')
      ''', False, str(src), str(ckpt))
  conv = tmp_path / 'converted'

  def convert(*extra):
    return subprocess.run(
        [sys.executable, '-m', 'flaxlegacy', 'convert', str(ckpt), str(conv),
         '--optimizer', 'Momentum', '--hparam', 'beta=0.9', '--format',
         'msgpack', *extra], capture_output=True, text=True, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=ROOT), check=False)

  p = convert('--rename-map', str(out / 'upgrade.json'))
  assert p.returncode == 1
  assert '--rename-map and --root-class go together' in p.stderr
  p = convert('--rename-map', str(out), '--root-class', 'Net', '--names',
              'linen')
  assert p.returncode == 1 and 'choose one' in p.stderr
  p = convert('--rename-map', str(out), '--root-class', 'Nope')
  assert p.returncode == 1 and "no upgraded class 'Nope'" in p.stderr
  p = convert('--rename-map', str(out / 'upgrade.json'), '--root-class', 'Net')
  assert p.returncode == 0, p.stderr
  assert 'module names: the rename map of Net' in p.stdout
  r = _python('''
      import json, sys, numpy as np
      from flax.training import checkpoints
      import model
      raw = checkpoints.restore_checkpoint(sys.argv[1], None)
      ref = np.load(sys.argv[2])
      y, _ = model.Net().apply(
          {'params': raw['params'], 'batch_stats': raw['batch_stats']},
          ref['x'], mutable=['batch_stats'])
      trace = raw['opt_state']['0']['trace']
      print(json.dumps({
          'params': sorted(raw['params']), 'trace': sorted(trace),
          'stats': sorted(raw['batch_stats']),
          'block_1': sorted(raw['batch_stats']['block_1']),
          'y': bool(np.allclose(y, ref['y'], rtol=1e-5, atol=1e-6)),
          'mom': bool(np.array_equal(trace['Dense_0']['kernel'], ref['mom'])),
          'mean': bool(np.array_equal(
              raw['batch_stats']['block_1']['BatchNorm_0']['mean'],
              ref['mean']))}))
      ''', True, str(out), str(conv), str(ckpt) + '.npz')
  linen = sorted(NET_MAP.values())
  assert r['params'] == linen and r['trace'] == linen
  assert r['stats'] == ['Block_0', 'block_1']
  assert r['block_1'] == ['BatchNorm_0']
  assert r['y'] and r['mom'] and r['mean'], r
