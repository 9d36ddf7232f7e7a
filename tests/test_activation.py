"""Foundation: legacy imports resolve, JAX aliases, nothing overridden, PRNG policy.

Most cases run a fresh interpreter, because activation is once per process
and the start-up .pth hook only acts at interpreter start.
"""

import json
import os
import subprocess
import sys
import textwrap
import zipfile

import pytest

from tests import conformance
from tests import installed

REPO = conformance.REPO


def run_python(code, env=None, args=(), check=True, cwd=None):
  """Runs ``code`` in a fresh interpreter of this environment."""
  full_env = dict(os.environ)
  full_env.setdefault('JAX_PLATFORMS', 'cpu')
  from flaxlegacy import _names  # pylint: disable=g-import-not-at-top
  for k in ('FLAXLEGACY', 'JAX_THREEFRY_PARTITIONABLE',
            'FLAX_USE_ORBAX_CHECKPOINTING',
            *(p.env for p in _names.POLICIES + _names.BEHAVIOURS)):
    full_env.pop(k, None)
  full_env.update(env or {})
  proc = subprocess.run([sys.executable, *args, '-c', textwrap.dedent(code)]
                        if code is not None else [sys.executable, *args],
                        env=full_env, capture_output=True, text=True,
                        timeout=300, cwd=cwd or REPO)
  if check and proc.returncode != 0:
    raise AssertionError(f'subprocess failed ({proc.returncode}):\n'
                         f'{proc.stdout}\n{proc.stderr}')
  return proc


LEGACY_SCRIPT = '''
import jax
import jax.numpy as jnp
from jax import random
from flax import nn, optim


class MLP(nn.Module):
  def apply(self, x):
    x = nn.Dense(x, features=4)
    x = nn.relu(x)
    return nn.Dense(x, features=2)


_, params = MLP.init_by_shape(random.PRNGKey(0), [((1, 3), jnp.float32)])
model = nn.Model(MLP, params)
optimizer = optim.Momentum(learning_rate=0.1, beta=0.9).create(model)
total = jax.tree_multimap(lambda a, b: a + b, params, params)
print(sorted(params), sorted(total['Dense_0']))
'''


def test_legacy_script_runs_unchanged_with_only_the_install(tmp_path):
  # Only `pip install -e .` was done: no PYTHONPATH, no import of flaxlegacy.
  script = tmp_path / 'legacy_train.py'
  script.write_text(LEGACY_SCRIPT)
  env = {'PYTHONPATH': ''}
  proc = run_python(None, env=env, args=(str(script),), cwd=str(tmp_path))
  assert "['Dense_0', 'Dense_1'] ['bias', 'kernel']" in proc.stdout


def test_start_up_hook_is_installed_and_dormant():
  proc = run_python('''
      import sys
      finders = [type(f).__name__ for f in sys.meta_path]
      print(finders[0], finders[-1])
      print(any(m.startswith(('jax', 'flax.')) for m in sys.modules))
  ''', env={'PYTHONPATH': ''}, cwd='/')
  first, last, heavy = proc.stdout.split()
  assert (first, last) == ('FlaxAttributeFinder', 'LegacyFinder')
  assert heavy == 'False'  # nothing heavy imported at start-up


@pytest.mark.parametrize('statement,check', [
    ('from flax import nn', 'nn.Module'),
    ('import flax.nn as nn', 'nn.Module'),
    ('from flax import optim', 'optim.Optimizer'),
    ('from flax.optim import adam', 'adam.Adam'),
    ('import flax.optim.momentum as m', 'm.Momentum'),
    ('import flax.optim.dynamic_scale as d', 'd.DynamicScale'),
    ('import flax.nn.base as b', 'b.Model'),
    ('import flax.nn.linear as l', 'l.Dense'),
    ('from flax.deprecated import nn', 'nn.Dense'),
    ('import flax.deprecated.nn.base as b', 'b.Module'),
    ('import flax; nn = flax.nn', 'nn.Dense'),
    ('import flax; optim = flax.optim', 'optim.Adam'),
])
def test_legacy_import_forms_resolve(statement, check):
  proc = run_python(f'{statement}\nprint({check}.__name__)')
  assert proc.stdout.split()[-1] == check.split('.')[-1]


def test_legacy_paths_are_the_flaxlegacy_modules():
  run_python('''
      import sys
      import flax.nn, flax.nn.base, flax.optim, flax.deprecated.nn
      import flaxlegacy.nn, flaxlegacy.optim
      assert flax.nn is flaxlegacy.nn is flax.deprecated.nn
      assert flax.nn.base is flaxlegacy.nn.base
      assert flax.optim is flaxlegacy.optim
      # The alias keeps the module's own spec (reload, importlib.resources).
      assert flax.nn.__spec__.name == 'flaxlegacy.nn', flax.nn.__spec__
  ''')


def test_stochastic_stays_the_function_after_submodule_import():
  run_python('''
      import sys
      import types
      from flax import nn
      import flax.nn.stochastic
      assert callable(nn.stochastic) and not isinstance(
          nn.stochastic, types.ModuleType), nn.stochastic
      assert isinstance(sys.modules['flax.nn.stochastic'], types.ModuleType)
  ''')


@pytest.mark.parametrize('statement,missing', [
    ('import flax.nn.not_a_module', 'flax.nn.not_a_module'),
    ('import flax.optim.not_a_module', 'flax.optim.not_a_module'),
    ('import flax.deprecated.nn.gone', 'flax.deprecated.nn.gone'),
])
def test_unprovided_legacy_path_names_coverage(statement, missing):
  proc = run_python(f'''
      try:
        {statement}
      except ImportError as e:
        print(type(e).__name__, isinstance(e, ModuleNotFoundError), e.name)
        print(e)
  ''')
  first, second = proc.stdout.splitlines()[:2]
  assert first == f'LegacyNotProvidedError True {missing}'
  assert f'flaxlegacy does not provide the legacy module {missing!r}' in second
  assert 'docs/coverage.md' in second and 'flaxlegacy check' in second


def test_unrelated_missing_modules_are_untouched():
  proc = run_python('''
      try:
        import flax.no_such_thing
      except ImportError as e:
        print(type(e).__name__, e)
  ''')
  assert proc.stdout.startswith('ModuleNotFoundError No module named')


ENUMERATE = '''
import importlib, json, sys
MODS = ['jax', 'jax.numpy', 'jax.lax', 'jax.random', 'jax.nn', 'jax.ops',
        'jax.tree_util', 'flax', 'flax.serialization', 'flax.training.checkpoints',
        'jax.lib', 'jax.test_util', 'flax.jax_utils', 'numpy', 'collections',
        'inspect']

def snapshot():
  snap = {}
  for m in MODS:
    mod = importlib.import_module(m)
    for name in dir(mod):
      try:
        snap[(m, name)] = getattr(mod, name)
      except Exception:
        pass
  return snap

import warnings
warnings.simplefilter('ignore')  # numpy's __getattr__ warns for np.str ...
import jax, jax.numpy, jax.lax, flax, flax.training.checkpoints
config_before = jax.config
before = snapshot()
import flaxlegacy
flaxlegacy.activate()
from flax import nn, optim
import flax.deprecated.nn
from jax.config import config
from jax.experimental import optimizers
after = snapshot()
changed = [f'{m}.{n}' + (' wraps it' if getattr(after.get((m, n)),
                                                 '__wrapped__', None) is v
                         else '')
           for (m, n), v in before.items()
           if (m, n) not in after or after[(m, n)] is not v]
added = sorted(f'{m}.{n}' for (m, n) in after if (m, n) not in before)
assert jax.config is config_before and config is config_before
print(json.dumps({'changed': changed, 'added': added}))
'''


def test_activation_overrides_nothing_that_exists():
  # FLAXLEGACY=off: the start-up hook stays out, so `before` is pristine.
  # The `arguments` behaviour wraps two functions (tests/test_behaviour.py:
  # the wrappers call them unchanged unless they would raise); without it
  # nothing that exists is replaced.
  proc = run_python(ENUMERATE, env={'FLAXLEGACY': 'off',
                                    'FLAXLEGACY_ARGUMENTS': 'modern'})
  assert json.loads(proc.stdout.splitlines()[-1])['changed'] == []
  proc = run_python(ENUMERATE, env={'FLAXLEGACY': 'off'})
  result = json.loads(proc.stdout.splitlines()[-1])
  assert sorted(result['changed']) == ['jax.lax.dynamic_slice wraps it',
                                       'jax.numpy.clip wraps it']
  # And the aliases legacy code needs were added.
  for name in ('jax.tree_multimap', 'jax.tree_map', 'jax.tree_leaves',
               'jax.tree_flatten', 'jax.tree_unflatten', 'jax.numpy.DeviceArray',
               'jax.lax.tie_in', 'jax.ops.index_update', 'jax.ops.index_add',
               'jax.ops.index', 'jax.random.shuffle', 'jax.nn.normalize',
               'flax.nn', 'flax.optim', 'jax.lib.xla_bridge',
               'jax.device_put_sharded', 'jax.custom_transforms',
               'flax.jax_utils._replicate',
               'numpy.float', 'numpy.math', 'numpy.float_',
               'collections.Iterable', 'inspect.getargspec'):
    assert name in result['added'], name


def test_jax_aliases_behave_as_legacy():
  proc = run_python('''
      import flaxlegacy; flaxlegacy.activate()
      import jax, jax.numpy as jnp, numpy as np
      from jax import lax, ops, random
      x = np.zeros((3, 3))
      y = ops.index_update(x, ops.index[1, :], 7.)
      z = ops.index_add(jnp.ones(3), ops.index[::2], 1.)
      print(y[1].tolist(), y[0].tolist(), z.tolist())
      print(lax.tie_in(1., 5.), isinstance(jnp.ones(2), jnp.DeviceArray))
      print(jax.tree_multimap(lambda a, b: a * b, [1, 2], [3, 4]))
      print(random.shuffle(random.PRNGKey(0), jnp.arange(5)).tolist() ==
            random.permutation(random.PRNGKey(0), jnp.arange(5)).tolist())
      from jax.experimental import optimizers
      print(optimizers.sgd.__module__)
      from jax.config import config
      config.enable_omnistaging()
      print(config is jax.config, config.omnistaging_enabled)
  ''')
  lines = proc.stdout.splitlines()
  assert lines[0] == '[7.0, 7.0, 7.0] [0.0, 0.0, 0.0] [2.0, 1.0, 2.0]'
  assert lines[1] == '5.0 True'
  assert lines[2] == '[3, 8]'
  assert lines[3] == 'True'
  assert lines[4] == 'jax.example_libraries.optimizers'
  assert lines[5] == 'True True'


def _prng_facts():
  path = os.path.join(conformance.reference_dir(), 'prng_facts.json')
  with open(path) as f:
    return json.load(f)


# How each prng_facts.json entry is computed (its key is a description).
_INITIALIZERS = {
    'lecun_normal': 'lecun_normal()', 'xavier_uniform': 'xavier_uniform()',
    'xavier_normal': 'xavier_normal()', 'he_uniform': 'he_uniform()',
    'normal_0.02': 'normal(0.02)', 'uniform_0.1': 'uniform(0.1)',
    'orthogonal': 'orthogonal()',
    'variance_scaling_fan_avg_uniform':
        "variance_scaling(2.0, 'fan_avg', 'uniform')",
}


def _fact_expression(key):
  import re  # pylint: disable=g-import-not-at-top
  if key.startswith('legacy submodule key'):
    unsigned = re.search(r'uint32 value (\d+)', key).group(1)
    return f'random.fold_in(PRNGKey(0), {unsigned})'
  if key.startswith('jax.nn.initializers.'):
    name, args = re.match(r'jax\.nn\.initializers\.(\S+?)\((.*)\)$',
                          key).groups()
    return f'jax.nn.initializers.{_INITIALIZERS[name]}({args})'
  return key.replace(' (odd length)', '').replace(' uint32', '')


def test_prng_policy_reproduces_legacy_random_facts(shared):
  del shared
  facts = {k: v for k, v in _prng_facts().items() if k != 'jax_version'}
  exprs = {k: _fact_expression(k) for k in facts}
  proc = run_python('''
      import json
      from flax import nn  # the legacy API switches the policy on
      import jax
      from jax import random
      from jax.random import PRNGKey
      import numpy as np
      env = {'random': random, 'PRNGKey': PRNGKey, 'jax': jax}
      out = {k: np.asarray(eval(e, env)).tolist() for k, e in EXPRS.items()}
      print(json.dumps(out))
  '''.replace('EXPRS', repr(exprs)))
  got = json.loads(proc.stdout.splitlines()[-1])
  assert len(facts) == 31
  import numpy as np  # pylint: disable=g-import-not-at-top
  for key, want in facts.items():
    want_arr = np.asarray(want)
    if want_arr.dtype.kind == 'f':
      # Random bits are identical; XLA's float arithmetic may differ by an ulp
      # (conformance README §3).
      np.testing.assert_allclose(got[key], want, rtol=1e-6, atol=1e-7,
                                 err_msg=key)
    else:
      assert got[key] == want, key
  assert got['random.split(PRNGKey(0))'] == [[4146024105, 967050713],
                                             [2718843009, 1272950319]]


@pytest.mark.parametrize('env,expected_split0', [
    ({}, 4146024105),                                       # legacy default
    ({'FLAXLEGACY_PRNG': 'modern'}, 1797259609),            # opt-out
    ({'JAX_THREEFRY_PARTITIONABLE': 'true'}, 1797259609),   # user's own choice
    ({'FLAXLEGACY_PRNG': 'legacy'}, 4146024105),
])
def test_prng_policy_switch(env, expected_split0):
  proc = run_python('''
      from flax import nn
      import jax
      print(int(jax.random.split(jax.random.PRNGKey(0))[0, 0]))
  ''', env=env)
  assert int(proc.stdout.split()[-1]) == expected_split0


def test_policy_is_announced_once():
  proc = run_python('''
      from flax import nn
      from flax import optim
      import flax.deprecated.nn
      import flaxlegacy; flaxlegacy.activate()
  ''')
  assert proc.stderr.count('flaxlegacy: legacy mode on') == 1
  assert 'FLAXLEGACY_PRNG' in proc.stderr


def test_bad_policy_value_is_a_clear_error():
  proc = run_python('from flax import nn', env={'FLAXLEGACY_PRNG': 'maybe'},
                    check=False)
  assert proc.returncode != 0
  assert "FLAXLEGACY_PRNG='maybe': expected \"legacy\" or \"modern\"" in proc.stderr


def test_activate_and_dash_m_work_without_the_pth(tmp_path):
  script = tmp_path / 'legacy.py'
  script.write_text(LEGACY_SCRIPT + 'import sys; print("args", sys.argv[1:])\n')
  off = {'FLAXLEGACY': 'off'}
  # Without the hook, legacy imports fail ...
  proc = run_python(None, env=off, args=(str(script),), check=False)
  assert proc.returncode != 0
  assert "cannot import name 'nn' from 'flax'" in proc.stderr, proc.stderr
  # ... `python -m flaxlegacy SCRIPT ARGS` runs it ...
  proc = run_python(None, env=off, args=('-m', 'flaxlegacy', str(script), '-x',
                                         '3'))
  assert "['Dense_0', 'Dense_1']" in proc.stdout
  assert "args ['-x', '3']" in proc.stdout
  # ... and so does flaxlegacy.activate().
  proc = run_python('import flaxlegacy; flaxlegacy.activate()\n' +
                    LEGACY_SCRIPT, env=off)
  assert "['Dense_0', 'Dense_1']" in proc.stdout


def test_wheel_ships_the_start_up_pth(tmp_path_factory):
  # Built from a copy of the sources (tests/installed.py), not in the
  # checkout, so that parallel tests never see a half-written build/.
  wheel = installed.build_wheel(
      os.path.join(installed.shared_root(tmp_path_factory), 'wheel'))
  with zipfile.ZipFile(wheel) as zf:
    names = zf.namelist()
    assert 'flaxlegacy.pth' in names
    pth = zf.read('flaxlegacy.pth').decode()
  assert 'flaxlegacy._hook' in pth and 'FLAXLEGACY' in pth
  assert 'flaxlegacy/_names.py' in names


@pytest.mark.parametrize('env,expect', [
    ({}, 'file quiet'),                                   # legacy default
    ({'FLAXLEGACY_CHECKPOINTS': 'modern'}, 'dir'),        # opt-out: Orbax
])
def test_checkpoint_policy(tmp_path, env, expect):
  proc = run_python(f'''
      import os, warnings
      from flax import nn
      from flax.training import checkpoints
      import jax.numpy as jnp
      # The interpreter runs with -W always::DeprecationWarning (as pytest or
      # a -W flag would); the policy's filter must still silence flax's.
      with warnings.catch_warnings(record=True) as caught:
        path = checkpoints.save_checkpoint({str(tmp_path)!r}, {{'a': jnp.ones(2)}}, 3)
      deprecations = [w for w in caught if 'Flax Checkpointing' in str(w.message)]
      kind = 'file' if os.path.isfile(path) else 'dir'
      print(kind, 'quiet' if not deprecations else 'warned')
  ''', env=env, args=('-W', 'always::DeprecationWarning'))
  assert proc.stdout.split()[-2:][:len(expect.split())] == expect.split()


def test_normalize_alias_is_the_unclipped_legacy_formula():
  proc = run_python('''
      from flax import nn
      import jax, jax.numpy as jnp, numpy as np
      x = jnp.array([[1., 2., 4.], [3., 3., 3.]])
      legacy = jax.nn.normalize(x)
      mean = x.mean(-1, keepdims=True)
      var = (x ** 2).mean(-1, keepdims=True) - mean ** 2
      np.testing.assert_allclose(legacy, (x - mean) / np.sqrt(var + 1e-5),
                                 rtol=1e-6)
      # Where rounding makes E[x^2] - E[x]^2 negative, legacy differs from
      # standardize (which clips at 0): here var + eps < 0 gives NaN.
      neg = jax.nn.normalize(jnp.ones(3), variance=jnp.array(-1.))
      print(bool(jnp.isnan(neg).all()),
            bool(jnp.isfinite(jax.nn.standardize(jnp.ones(3))).all()))
      print(jax.nn.normalize is nn.activation.normalize,
            jax.nn.normalize.__name__)
  ''')
  first, second = proc.stdout.splitlines()[-2:]
  assert first == 'True True'
  assert second == 'False _normalize'
