"""Changed JAX behaviour restored in legacy processes, and legacy from line one.

Issue 18, sections 4 and 5.  Every case runs in a fresh interpreter (the
restorations are per process) and reproduces the pattern real 2020-2021
code used; each also checks the opt-out and that a modern process (no
legacy import, FLAXLEGACY unset) still behaves as today's JAX.
"""

import os
import subprocess
import sys
import textwrap

import pytest

from tests.test_activation import REPO, run_python

MULTI = {'XLA_FLAGS': '--xla_force_host_platform_device_count=8'}


def lines(proc):
  return proc.stdout.strip().splitlines()


# --- scalar conversion --------------------------------------------------------

SCALARS = '''
import operator
import jax, jax.numpy as jnp, numpy as np
LEGACY
rng = jax.random.PRNGKey(0)
value = jax.random.randint(rng, [1], 0, 1000)
try:
  # A data pipeline seeds its shuffle this way.
  seed = int(jax.random.randint(rng, [1], 0, 1000))
  order = np.random.RandomState(seed).permutation(5).tolist()
  want = np.random.RandomState(int(np.asarray(value)[0])).permutation(5)
  print('int', seed == int(np.asarray(value)[0]), order == want.tolist())
  print('float', float(jnp.full((1, 1), 2.5)), complex(jnp.ones(1)),
        bool(jnp.zeros(1)), type(int(value)).__name__)
except TypeError as e:
  print('TypeError', e)
for convert in (int, float):
  try:
    convert(jnp.ones(2))
  except TypeError as e:
    print('size 2:', e)
try:
  operator.index(jnp.ones(1, jnp.int32))
except TypeError as e:
  print('index:', e)
'''


def test_int_of_a_one_element_array_converts_in_legacy_processes():
  proc = run_python(SCALARS.replace('LEGACY', 'from flax import nn'))
  out = lines(proc)
  assert out[0] == 'int True True'
  assert out[1] == 'float 2.5 (1+0j) False int'
  # Unchanged where NumPy 1.x / legacy JAX raised as well.
  assert out[2:4] == ['size 2: Only scalar arrays can be converted to Python '
                      'scalars; got arr.ndim=1'] * 2
  assert out[4] == ('index: Only integer scalar arrays can be converted to a '
                    'scalar index.')


@pytest.mark.parametrize('legacy,env', [
    ('from flax import nn', {'FLAXLEGACY_SCALARS': 'modern'}),
    ('', {}),  # a modern process
])
def test_scalar_conversion_opt_out_and_modern_process(legacy, env):
  proc = run_python(SCALARS.replace('LEGACY', legacy), env=env)
  assert lines(proc)[0] == ('TypeError Only scalar arrays can be converted to '
                            'Python scalars; got arr.ndim=1')


# --- pmap inputs --------------------------------------------------------------

PMAP = '''
import jax, jax.numpy as jnp, numpy as np
from flax import jax_utils
from flax.training import common_utils
LEGACY
assert jax.local_device_count() == 8

@jax.pmap
def step(key, count):
  return jax.random.uniform(key, ()) + count

state = jax_utils.replicate({'step': jnp.array(3, jnp.int32)})
key = jax.random.PRNGKey(0)
step_key = jax.random.fold_in(key, state['step'][0])
keys = common_utils.shard_prng_key(step_key)
try:
  out = np.asarray(step(keys, state['step']))
except ValueError as e:
  print('ValueError', str(e).splitlines()[0])
else:
  # The same keys, moved by hand, and the same draws on the host.
  want = np.asarray(jax.vmap(lambda k: jax.random.uniform(k, ()))(
      np.asarray(keys))) + 3
  print('moved', np.array_equal(out, want), out.shape)
  again = step(keys, state['step'])  # second call: same program, same result
  print('again', np.array_equal(np.asarray(again), out),
        step.lower(keys, state['step']) is not None)
'''


def test_pmap_moves_keys_derived_from_a_replicated_step():
  proc = run_python(PMAP.replace('LEGACY', 'from flax import nn, optim'),
                    env=MULTI)
  assert lines(proc) == ['moved True (8,)', 'again True True']


def test_pmap_on_a_replicated_legacy_optimizer():
  # The real loop: optimizer.replicate(), fold_in on its step, pmapped step.
  proc = run_python('''
      import jax, jax.numpy as jnp, numpy as np
      from flax import nn, optim
      from flax.training import common_utils

      class Net(nn.Module):
        def apply(self, x):
          return nn.Dense(x, 2)

      _, params = Net.init_by_shape(jax.random.PRNGKey(1), [((1, 3), jnp.float32)])
      optimizer = optim.GradientDescent(0.1).create(nn.Model(Net, params))
      optimizer = optimizer.replicate()

      @jax.pmap
      def noisy_norm(key, model):
        noise = jax.random.normal(key, (1, 3))
        return jnp.sum(model(noise) ** 2)

      step_key = jax.random.fold_in(jax.random.PRNGKey(0),
                                    optimizer.state.step[0])
      keys = common_utils.shard_prng_key(step_key)
      out = np.asarray(noisy_norm(keys, optimizer.target))
      model = jax.tree_util.tree_map(lambda x: np.asarray(x)[0],
                                     optimizer.target)
      want = [float(jnp.sum(model(jax.random.normal(k, (1, 3))) ** 2))
              for k in np.asarray(keys)]
      np.testing.assert_allclose(out, want, rtol=1e-6)
      print('ok', out.shape)
  ''', env=MULTI)
  assert lines(proc)[-1] == 'ok (8,)'


@pytest.mark.parametrize('legacy,env', [
    ('from flax import nn', {'FLAXLEGACY_PMAP': 'modern'}),
    ('', {}),
])
def test_pmap_opt_out_and_modern_process(legacy, env):
  proc = run_python(PMAP.replace('LEGACY', legacy), env={**MULTI, **env})
  assert lines(proc) == ['ValueError Sharding passed to jit does not match '
                         'the sharding on the respective arg. Got jit '
                         "sharding: NamedSharding(mesh=Mesh('_internal_pmap_"
                         "axis_name': 8, axis_types=(Auto,)), spec=P('_"
                         "internal_pmap_axis_name',), memory_kind=device),"]


# --- iteration ----------------------------------------------------------------

ITERATION = '''
import jax, jax.numpy as jnp, numpy as np
LEGACY

class CharacterTable:
  """seq2seq's table (legacy examples/seq2seq/train.py), same decode loop."""

  def __init__(self, chars):
    self._indices_char = dict(enumerate(chars))
    self.eos_id = len(chars)

  def decode(self, inputs):
    chars = []
    for elem in inputs:
      if elem == self.eos_id:
        break
      chars.append(self._indices_char[elem])
    return ''.join(chars)

table = CharacterTable('0123456789+')
logits = jax.nn.one_hot(jnp.array([1, 2, 10, 3, 11, 5]), 12)
try:
  print('decoded', table.decode(logits.argmax(axis=-1)))
except TypeError as e:
  print('TypeError', e)
print(type(next(iter(jnp.arange(3)))).__name__,
      type(next(iter(jnp.ones((2, 2))))).__name__)
key, subkey = jax.random.split(jax.random.PRNGKey(0))
print(type(key).__name__, len(list(jnp.arange(250))))
# Tracing is untouched: iterating a tracer unpacks tracers.
print(float(jax.jit(lambda x: sum(x))(jnp.arange(4.))),
      jax.jit(lambda x: [type(e).__name__ for e in x][0] and x)(
          jnp.ones(2)).shape)
'''


def test_iteration_yields_hashable_numpy_scalars_in_legacy_processes():
  proc = run_python(ITERATION.replace('LEGACY', 'from flax import nn'))
  assert lines(proc) == ['decoded 12+3', 'int32 ArrayImpl', 'ArrayImpl 250',
                         '6.0 (2,)']


@pytest.mark.parametrize('legacy,env', [
    ('from flax import nn', {'FLAXLEGACY_ITERATION': 'modern'}),
    ('', {}),
])
def test_iteration_opt_out_and_modern_process(legacy, env):
  proc = run_python(ITERATION.replace('LEGACY', legacy), env=env)
  out = lines(proc)
  assert out[0] == "TypeError unhashable type: 'jaxlib._jax.ArrayImpl'"
  assert out[1] == 'ArrayImpl ArrayImpl'


# --- removed keywords, looser argument types ----------------------------------

ARGUMENTS = '''
import jax, jax.numpy as jnp, numpy as np
from jax import lax
LEGACY
x = jnp.array([-3., 0.5, 2e4])
try:
  print('clip', jnp.clip(x, a_max=1e4).tolist(),
        jnp.clip(x, a_min=0., a_max=1.).tolist(),
        jnp.clip(a=x, a_min=-1.).tolist())
except TypeError as e:
  print('TypeError', e)
try:
  print('method', x.clip(a_min=0.).tolist(),
        jax.jit(lambda v: v.clip(a_max=1.))(x).tolist())
except TypeError as e:
  print('TypeError', e)

pos_embedding = jnp.arange(2 * 5 * 3.).reshape(1, 10, 3)

@jax.jit
def embed_at(i):
  # Autoregressive decoding's position embedding (legacy wmt / lm1b).
  _, _, df = pos_embedding.shape
  return lax.dynamic_slice(pos_embedding, jnp.array((0, i, 0)),
                           jnp.array((1, 1, df)))

try:
  print('slice', embed_at(4).tolist() == pos_embedding[:, 4:5].tolist())
except TypeError as e:
  print('TypeError', str(e).splitlines()[0])

@jax.jit
def data_dependent(i):
  return lax.dynamic_slice(pos_embedding, jnp.array((0, i, 0)),
                           jnp.array((1, 1, i)))
try:
  data_dependent(2)
except TypeError as e:
  print('still', str(e).splitlines()[0])
print(jnp.clip(x, 0., 1.).tolist(), jnp.clip(x, max=1.).tolist())
'''


def test_legacy_arguments_accepted_in_legacy_processes():
  proc = run_python(ARGUMENTS.replace('LEGACY', 'from flax import nn'))
  assert lines(proc) == [
      'clip [-3.0, 0.5, 10000.0] [0.0, 0.5, 1.0] [-1.0, 0.5, 20000.0]',
      'method [0.0, 0.5, 20000.0] [-3.0, 0.5, 1.0]',
      'slice True',
      'still Shapes must be 1D sequences of concrete values of integer type, '
      'got JitTracer(int32[3]).',
      '[0.0, 0.5, 1.0] [-3.0, 0.5, 1.0]']


@pytest.mark.parametrize('legacy,env', [
    ('from flax import nn', {'FLAXLEGACY_ARGUMENTS': 'modern'}),
    ('', {}),
])
def test_arguments_opt_out_and_modern_process(legacy, env):
  proc = run_python(ARGUMENTS.replace('LEGACY', legacy), env=env)
  out = lines(proc)
  assert out[0] == "TypeError clip() got an unexpected keyword argument 'a_max'"
  assert out[1] == ("TypeError _clip() got an unexpected keyword argument "
                    "'a_min'")
  assert out[2] == ('TypeError Shapes must be 1D sequences of concrete values '
                    'of integer type, got JitTracer(int32[3]).')


def test_modern_process_is_untouched():
  # FLAXLEGACY unset, no legacy import: JAX's own methods and functions.
  proc = run_python('''
      import sys, jax, jax.numpy as jnp
      from jax import lax
      from jax._src import array, core, pmap
      patched = [getattr(array.ArrayImpl, m) for m in
                 ('__int__', '__float__', '__complex__', '__iter__')]
      patched += [jnp.clip, lax.dynamic_slice, pmap._cached_shard_map,
                  array.ArrayImpl.clip, core.ShapedArray.clip.fun]
      print([hasattr(f, '_flaxlegacy_modern') for f in patched],
            'flaxlegacy._activate' in sys.modules)
  ''')
  assert lines(proc) == [str([False] * 9) + ' False']


def test_behaviours_are_announced_in_the_one_log_line():
  proc = run_python('from flax import nn', env={'FLAXLEGACY_PMAP': 'modern'})
  assert proc.stderr.count('flaxlegacy: legacy mode on') == 1
  line = next(l for l in proc.stderr.splitlines() if 'legacy mode on' in l)
  assert ('legacy mode on for prng, checkpoints, frozendict, scalars, '
          'iteration, arguments, linen_keys, initializers, param_override, '
          'carries, attention, early_stopping, group_norm (') in line
  assert 'FLAXLEGACY_SCALARS' in line and 'FLAXLEGACY_PMAP' not in line


# --- legacy from the first line -----------------------------------------------

EARLY = '''
import sys
import jax
print('flax.nn' in sys.modules, 'flax' in sys.modules)
print(jax.tree_map(lambda x: x * 2, {'a': 1}))
print(int(jax.random.split(jax.random.PRNGKey(0))[0, 0]))
'''


@pytest.mark.parametrize('env,split0', [
    ({'FLAXLEGACY': 'on'}, 4146024105),
    ({'FLAXLEGACY': 'on', 'FLAXLEGACY_PRNG': 'modern'}, 1797259609),
])
def test_flaxlegacy_on_is_legacy_from_the_first_line(env, split0):
  proc = run_python(EARLY, env=env)
  assert lines(proc) == ['False False', "{'a': 2}", str(split0)]
  assert proc.stderr.count('flaxlegacy: legacy mode on') == 1


def test_plain_process_removed_names_answer_on_first_access():
  # No FLAXLEGACY=on: the names answer (first-access fallback), but legacy
  # mode waits for the first legacy import: today's stream, no log line.
  proc = run_python(EARLY)
  assert lines(proc) == ['False False', "{'a': 2}", '1797259609']
  assert 'legacy mode on' not in proc.stderr
  proc = run_python(EARLY, env={'FLAXLEGACY_FALLBACK': 'off'}, check=False)
  assert "module 'jax' has no attribute 'tree_map'" in proc.stderr


def test_fallback_answers_only_removed_names():
  proc = run_python('''
      import sys, jax, jax.numpy as jnp
      from jax import lax
      before = dir(jax), dir(jnp)
      print(hasattr(jax, 'tree_multimap'), jax.tree_multimap is
            jax.tree_util.tree_map, lax.tie_in(1, 2), jnp.DeviceArray is jax.Array)
      print((dir(jax), dir(jnp)) == before, 'tree_multimap' in vars(jax))
      for owner, name in ((jax, 'no_such_name'), (jnp, 'no_such_name'),
                          (lax, 'pvary')):  # JAX's own message is kept
        try:
          getattr(owner, name)
        except AttributeError as e:
          print(e)
      from jax.test_util import check_eq  # a module imported later
      check_eq({'a': 1.}, {'a': 1.})
      from flax import nn  # activation then defines the names for real
      print('tree_multimap' in vars(jax), jax.tree_multimap is
            jax.tree_util.tree_map)
  ''')
  assert lines(proc) == [
      'True True 2 True', 'True False',
      "module 'jax' has no attribute 'no_such_name'",
      "module 'jax.numpy' has no attribute 'no_such_name'",
      'jax.lax.pvary was deprecated in JAX v0.8.2 and removed in JAX v0.10.0; '
      "use `jax.lax.pcast(..., to='varying')",
      'True True']


def test_flaxlegacy_on_imports_nothing_heavy_at_start_up():
  proc = run_python('''
      import sys
      print(sorted(m for m in sys.modules
                   if m.split('.')[0] in ('jax', 'flax', 'numpy', 'optax')))
      print(sorted(m for m in sys.modules if m.startswith('flaxlegacy')))
  ''', env={'FLAXLEGACY': 'on'}, cwd='/')
  # The names table and the first-access fallback load for the Python
  # names (collections is imported at start-up here); not _activate, which
  # imports logging & co. and must not run inside the standard library's
  # own imports (tests/test_install.py); nothing of JAX, Flax or NumPy.
  assert lines(proc) == ['[]', "['flaxlegacy', 'flaxlegacy._fallback', "
                         "'flaxlegacy._hook', 'flaxlegacy._names', "
                         "'flaxlegacy.version']"]


def test_flaxlegacy_on_serves_python_and_numpy_names_before_jax():
  """A data module's collections.Iterable / np.float before `import jax`."""
  proc = run_python('''
      import collections, sys
      print(isinstance([1], collections.Iterable), 'jax' in sys.modules)
      import numpy as np
      print(np.float is float, np.math.factorial(4), 'jax' in sys.modules)
  ''', env={'FLAXLEGACY': 'on'}, cwd='/')
  assert lines(proc) == ['True False', 'True 24 False']


LEGACY_TEST_FILE = '''
import jax
LEAVES = jax.tree_map(lambda x: x + 1, [1, 2])  # before any legacy import
EARLY_SPLIT = int(jax.random.split(jax.random.PRNGKey(0))[0, 0])

def test_names_and_stream_from_the_first_line():
  assert LEAVES == [2, 3]
  assert EARLY_SPLIT == 4146024105
  from flax import nn  # the legacy API is there too
  assert nn.Dense

def test_EXPECTED():
  assert 'EXPECTED' == 'pass'
'''


@pytest.mark.parametrize('command,env', [
    (('-m', 'flaxlegacy', 'run', '-m', 'pytest'), {'FLAXLEGACY': 'off'}),
    (('-m', 'flaxlegacy', '-m', 'pytest'), {'FLAXLEGACY': 'off'}),
    (('-m', 'pytest'), {'FLAXLEGACY': 'on'}),
])
def test_run_dash_m_pytest_runs_a_legacy_suite(tmp_path, command, env):
  (tmp_path / 'test_legacy_suite.py').write_text(
      LEGACY_TEST_FILE.replace('EXPECTED', 'pass'))
  proc = run_python(None, env=env, cwd=str(tmp_path),
                    args=(*command, '-q', '-p', 'no:cacheprovider',
                          'test_legacy_suite.py'))
  assert '2 passed' in proc.stdout, proc.stdout + proc.stderr
  # The module's exit status is the command's.
  (tmp_path / 'test_legacy_suite.py').write_text(
      LEGACY_TEST_FILE.replace('EXPECTED', 'fail'))
  proc = run_python(None, env=env, cwd=str(tmp_path), check=False,
                    args=(*command, '-q', '-p', 'no:cacheprovider',
                          'test_legacy_suite.py'))
  assert proc.returncode == 1 and '1 failed, 1 passed' in proc.stdout


def test_run_sets_flaxlegacy_on_for_child_processes(tmp_path):
  script = tmp_path / 'parent.py'
  script.write_text(textwrap.dedent('''
      import os, subprocess, sys
      print(os.environ['FLAXLEGACY'])
      child = 'import jax; print(jax.tree_map(len, ["ab"]))'
      print(subprocess.run([sys.executable, '-c', child], check=True,
                           capture_output=True, text=True).stdout.strip())
  '''))
  proc = run_python(None, args=('-m', 'flaxlegacy', 'run', str(script)))
  assert lines(proc) == ['on', '[2]']


@pytest.mark.parametrize('argv,message', [
    (('run', 'missing.py'), "python -m flaxlegacy run: error: can't open "
     "file '{cwd}/missing.py': [Errno 2] No such file or directory"),
    (('missing.py',), "python -m flaxlegacy: error: can't open file "
     "'{cwd}/missing.py': [Errno 2] No such file or directory"),
    (('chekc', 'src/'), "python -m flaxlegacy: error: unknown command 'chekc' "
     '(commands: run, check, convert, data, upgrade; or a script to run); did you '
     "mean 'check'?"),
    (('run', '-m'), 'python -m flaxlegacy run: error: argument expected for '
     'the -m option'),
    (('run', '-m', 'no_such_module_x'), 'python -m flaxlegacy run: error: No '
     'module named no_such_module_x'),
    (('run',), 'python -m flaxlegacy run: error: give a SCRIPT or -m MODULE'),
])
def test_command_line_errors_are_one_line_and_status_2(tmp_path, argv,
                                                       message):
  proc = run_python(None, args=('-m', 'flaxlegacy', *argv), check=False,
                    cwd=str(tmp_path))
  assert proc.returncode == 2
  assert proc.stderr.splitlines() == [message.format(cwd=tmp_path)]
  assert proc.stdout == ''


def test_the_flaxlegacy_console_script_reports_the_same(tmp_path):
  exe = os.path.join(os.path.dirname(sys.executable), 'flaxlegacy')
  if not os.path.exists(exe):
    pytest.skip('no flaxlegacy console script next to this interpreter')
  env = dict(os.environ, PYTHONPATH=REPO)
  proc = subprocess.run([exe, 'chekc'], capture_output=True, text=True,
                        env=env, cwd=str(tmp_path), timeout=120)
  assert proc.returncode == 2
  assert proc.stderr.startswith("flaxlegacy: error: unknown command 'chekc'")


def test_check_reports_uses_that_need_a_restored_behaviour():
  from flaxlegacy.migrate import check  # pylint: disable=g-import-not-at-top
  source = textwrap.dedent('''
      import jax.numpy as jnp
      from jax import lax
      def f(x, i, df):
        y = jnp.clip(x, a_max=1e4)
        z = x.clip(a_min=0.)
        fine = jnp.clip(x, 0, 1) + x.clip(max=2.)
        return lax.dynamic_slice(x, jnp.array((0, i, 0)), jnp.array((1, 1, df)))
  ''')
  found = [(f.line, f.name, f.status, f.note)
           for f in check.scan_source(source, 'f.py')]
  note = ('legacy behaviour restored in legacy mode (FLAXLEGACY_ARGUMENTS='
          'modern turns it off)')
  assert found == [
      (5, 'jax.numpy.clip(a_max=)', 'supported', note),
      (6, 'Array.clip(a_min=)', 'supported', note),
      (8, 'jax.lax.dynamic_slice(slice_sizes=jnp.array)', 'supported', note)]


def test_unavailable_subcommand_says_why_whatever_its_arguments(
    monkeypatch, capsys):
  # A subcommand whose module cannot be imported (a missing dependency,
  # e.g. libcst for `upgrade`) names the import error, also when it is
  # given the arguments it would take: not argparse's "unrecognized
  # arguments" about them.
  from flaxlegacy import cli  # pylint: disable=g-import-not-at-top
  monkeypatch.setitem(cli.SUBCOMMANDS, 'fake',
                      ('flaxlegacy_no_such_module_x', 'a missing one'))
  for argv in (['fake'], ['fake', 'src/', '--out', 'dst/']):
    with pytest.raises(SystemExit) as e:
      cli.main(argv, prog='flaxlegacy')
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert ("flaxlegacy: error: fake is unavailable: No module named "
            "'flaxlegacy_no_such_module_x'") in err, err
