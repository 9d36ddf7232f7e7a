"""The HOWTO diffs (howtos/): each applies to the current examples and the
patched program passes its smoke test, which checks that the technique
happened; a stale or broken diff fails with a message naming it.

Every check goes through howtos/check_diffs.py, the script maintainers run by
hand, so CI and the script cannot disagree.  The smoke tests run offline on
the MNIST stand-in that `flaxlegacy data mnist` writes into a fresh HOME.
"""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECK = os.path.join(REPO, 'howtos', 'check_diffs.py')

_spec = importlib.util.spec_from_file_location('check_diffs', CHECK)
check_diffs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_diffs)

OK = re.compile(r'ok   (\S+)\.diff \(\d+ s\) SMOKE-RESULT \{.*\}$')
MNIST_HOWTOS = sorted(n for n, h in check_diffs.HOWTOS.items()
                      if h.example == 'examples/mnist')


# One worker runs the file: its tests share one check_diffs.py run.
pytestmark = pytest.mark.xdist_group('howtos')

def _env(home):
  env = {k: v for k, v in os.environ.items()
         if k not in ('TFDS_DATA_DIR', 'XDG_CACHE_HOME', 'XLA_FLAGS',
                      'FLAXLEGACY_STANDIN_DIR')}
  env.update(HOME=str(home), JAX_PLATFORMS='cpu', FLAXLEGACY_OFFLINE='1',
             TF_CPP_MIN_LOG_LEVEL='2', PYTHONUNBUFFERED='1',
             # Shared by the HOWTOs' smoke tests (see check_diffs.py).
             JAX_COMPILATION_CACHE_DIR=os.path.join(str(home), 'jax-cache'))
  return env


def _check(args, home, timeout=1200):
  run = subprocess.run([sys.executable, CHECK] + args, cwd=REPO,
                       env=_env(home), capture_output=True, text=True,
                       timeout=timeout)
  return run.returncode, run.stdout, run.stderr


@pytest.fixture(scope='module')
def home(tmp_path_factory):
  """A fresh HOME in which `flaxlegacy data mnist` prepared the stand-in."""
  home = tmp_path_factory.mktemp('home')
  run = subprocess.run([sys.executable, '-m', 'flaxlegacy', 'data', 'mnist'],
                       env=_env(home), capture_output=True, text=True,
                       timeout=600)
  assert run.returncode == 0, run.stdout + run.stderr
  return home


def _copy_root(tmp_path):
  """A repository root with the examples and howtos of this checkout."""
  root = tmp_path / 'root'
  ignore = shutil.ignore_patterns('__pycache__', '*.pyc')
  for part in ('examples', 'howtos'):
    shutil.copytree(os.path.join(REPO, part), root / part, ignore=ignore)
  return root


# --- the table ---------------------------------------------------------------


def test_every_diff_is_listed_with_a_smoke_test_and_a_readme_paragraph():
  assert check_diffs.check_table(REPO) == []
  assert check_diffs.diff_names(REPO) == sorted(check_diffs.HOWTOS)
  with open(os.path.join(REPO, 'howtos', 'README.md')) as f:
    headings = re.findall(r'^## `(\S+)\.diff`', f.read(), re.M)
  assert sorted(headings) == sorted(check_diffs.HOWTOS)


def test_an_unlisted_or_missing_diff_is_named(tmp_path):
  root = _copy_root(tmp_path)
  (root / 'howtos' / 'diffs' / 'label-smoothing.diff').write_text('')
  os.remove(root / 'howtos' / 'diffs' / 'ensembling.diff')
  os.remove(root / 'howtos' / 'smoke' / 'checkpointing.py')
  assert check_diffs.check_table(str(root)) == [
      'label-smoothing.diff has no entry in HOWTOS (howtos/check_diffs.py)',
      'ensembling.diff is listed in HOWTOS but howtos/diffs/ensembling.diff '
      'does not exist',
      'checkpointing.diff has no smoke test (howtos/smoke/checkpointing.py)',
  ]


# --- stale and broken diffs fail, naming the diff ------------------------------


def test_a_diff_that_no_longer_applies_fails_naming_it(tmp_path):
  root = _copy_root(tmp_path)
  train = root / 'examples' / 'mnist' / 'train.py'
  text = train.read_text()
  # A rename in the example that every MNIST HOWTO's context covers.
  assert text.count('optimizer') > 10
  train.write_text(text.replace('optimizer', 'opt'))
  rc, out, err = _check(['--root', str(root)] + MNIST_HOWTOS, tmp_path)
  assert rc == 1, out + err
  for name in MNIST_HOWTOS:
    assert (f'FAIL {name}.diff no longer applies to the current examples:\n'
            f'error: patch failed: examples/mnist/train.py:') in out, out
  assert f'{len(MNIST_HOWTOS)} HOWTO check(s) failed' in out
  assert 'SMOKE-RESULT' not in out  # nothing ran


def test_a_diff_whose_program_fails_is_named(tmp_path, home):
  root = _copy_root(tmp_path)
  work = tmp_path / 'work'
  shutil.copytree(root / 'examples', work / 'examples')
  subprocess.run(['git', 'init', '-q', str(work)], check=True)
  subprocess.run(['git', 'add', '-A'], cwd=work, check=True)
  subprocess.run(['git', '-c', 'user.name=t', '-c', 'user.email=t@t',
                  'commit', '-qm', 'base'], cwd=work, check=True)
  train = work / 'examples' / 'mnist' / 'train.py'
  train.write_text(train.read_text().replace(
      '\nFLAGS = flags.FLAGS\n',
      "\nraise RuntimeError('broken by the patch')\nFLAGS = flags.FLAGS\n"))
  diff = subprocess.run(['git', 'diff'], cwd=work, check=True,
                        capture_output=True, text=True).stdout
  (root / 'howtos' / 'diffs' / 'polyak-averaging.diff').write_text(diff)
  rc, out, err = _check(['--root', str(root), 'polyak-averaging'], home)
  assert rc == 1, out + err
  assert ("FAIL polyak-averaging.diff: the patched program's smoke test "
          'failed (exit status 1)') in out, out
  assert "RuntimeError: broken by the patch" in out


def test_an_unknown_name_is_refused(tmp_path):
  rc, out, _ = _check(['no-such-howto'], tmp_path)
  assert rc == 1
  assert out.startswith('FAIL no-such-howto.diff: no such HOWTO (known: ')


# --- every HOWTO applies, runs and does what it says ---------------------------


def _assert_polyak(r):
  assert r['epochs_logged'] == 2
  assert r['ema_loss'] != r['raw_loss']
  assert r['ema_to_trained'] > 1e-4 and r['ema_to_initial'] > 1e-4


def _assert_ensembling(r):
  assert r['devices'] == 8 and len(r['member_accuracy']) == 8
  assert len(set(r['member_accuracy'])) > 1  # members differ
  assert r['ensemble_accuracy'] > 30


def _assert_distributed(r):
  assert r['processes'] == 2
  assert len(set(r['shard_losses'])) == 8  # each device had its own data
  assert r['max_diff_2x4_vs_1x8'] < 1e-5
  assert len(r['epoch_metrics']) == 4  # train/test loss/accuracy


def _assert_checkpointing(r):
  assert r['checkpoints'] == ['checkpoint_1', 'checkpoint_2']
  assert (r['resumed_at_step'], r['final_step']) == (16, 32)


def _assert_sharded(r):
  assert r['mesh'] == {'data': 4, 'model': 2} and r['split_leaves'] == 8
  assert r['parameters']['Dense_2'] == {'bias': [], 'kernel': [None, 'model']}


def _assert_mixed_precision(r):
  assert r['example_tests'] == 0  # the ImageNet example's tests take minutes
  assert r['conv_dtypes'] == ['float16'] and r['convs'] >= 9
  assert [e[0] for e in r['epochs']] == ['1', '2']
  assert r['final_scale'] == 2. ** 16 * 0.5 ** r['skipped']


FACTS = {
    'polyak-averaging': _assert_polyak,
    'ensembling': _assert_ensembling,
    'distributed-training': _assert_distributed,
    'checkpointing': _assert_checkpointing,
    'sharded-training': _assert_sharded,
    'mixed-precision': _assert_mixed_precision,
}


def test_every_howto_has_facts_checked():
  assert sorted(FACTS) == sorted(check_diffs.HOWTOS)


@pytest.fixture(scope='module')
def outcomes(home, tmp_path_factory):
  """One run of check_diffs.py over all HOWTOs, two at a time (CI has 2
  cores and a smoke test keeps about one busy): {name: outcome}."""
  path = tmp_path_factory.mktemp('outcomes') / 'outcomes.json'
  rc, out, err = _check(['--jobs', '2', '--json', str(path)], home)
  if not path.exists():
    pytest.fail(f'check_diffs.py wrote no outcomes ({rc}):\n{out}\n{err}')
  with open(path) as f:
    outcomes = json.load(f)
  # The exit status and the printed lines agree with the outcomes.
  assert rc == (0 if all(o['ok'] for o in outcomes.values()) else 1), err
  for name, outcome in outcomes.items():
    assert outcome['message'] in out
    if outcome['ok']:
      assert OK.match(outcome['message']).group(1) == name
  return outcomes


@pytest.mark.slow
@pytest.mark.parametrize('name', sorted(check_diffs.HOWTOS))
def test_howto_applies_runs_and_does_what_it_says(name, outcomes):
  outcome = outcomes[name]
  assert outcome['ok'], outcome['message'][-8000:]
  result = outcome['result']
  assert result['howto'] == name, result
  if check_diffs.HOWTOS[name].example == 'examples/mnist':
    assert result['example_tests'] > 0, result  # the patched train_test.py
  FACTS[name](result)
