#!/usr/bin/env python
"""Checks every HOWTO diff: it applies to a clean copy of the examples and the
patched program runs and does what the HOWTO says.

    python howtos/check_diffs.py                # all HOWTOs
    python howtos/check_diffs.py ensembling     # some of them
    python howtos/check_diffs.py --keep /tmp/h  # also keep the patched copies
    python howtos/check_diffs.py --jobs 2       # two at a time (2 cores)

For each ``howtos/diffs/NAME.diff`` (every one must be listed in ``HOWTOS``
below, and every listed one must exist):

1. the repository's ``examples/`` is copied to a fresh directory, and
   ``git apply`` applies the diff there; a diff that no longer applies fails
   with git's message, naming the diff and the file it no longer fits;
2. the smoke test ``howtos/smoke/NAME.py`` runs in the patched example's
   directory, on CPU with the HOWTO's number of devices: it runs the patched
   example's own tests (``train_test.py``) and the patched program's ``main``
   as its command line would, then checks that the technique happened (its
   last line is ``SMOKE-RESULT {json facts}``).

The examples read TFDS datasets: prepare them first (``flaxlegacy data
mnist``).  Subprocesses run with ``FLAXLEGACY_OFFLINE=1`` unless it is set,
so nothing is downloaded.  Exit status 0 when every HOWTO checked passes.
"""

import argparse
import collections
import concurrent.futures
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HOWTOS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HOWTOS_DIR)

Howto = collections.namedtuple('Howto', 'example devices')

# NAME -> the example directory the diff patches (its smoke test runs there)
# and the number of CPU devices its smoke test needs.  Heaviest first: with
# --jobs, the checks start in this order.
HOWTOS = {
    'distributed-training': Howto('examples/mnist', 8),
    'mixed-precision': Howto('examples/imagenet', 2),
    'ensembling': Howto('examples/mnist', 8),
    'sharded-training': Howto('examples/mnist', 8),
    'checkpointing': Howto('examples/mnist', 1),
    'polyak-averaging': Howto('examples/mnist', 1),
}

RESULT_PREFIX = 'SMOKE-RESULT '


class CheckError(Exception):
  """A HOWTO failed; the message names its diff."""


def diff_names(root):
  """Names of the diffs in ``root/howtos/diffs``, sorted."""
  paths = glob.glob(os.path.join(root, 'howtos', 'diffs', '*.diff'))
  return sorted(os.path.basename(p)[:-len('.diff')] for p in paths)


def check_table(root):
  """Every diff has a table entry and a smoke test, and vice versa."""
  problems = []
  names = diff_names(root)
  for name in names:
    if name not in HOWTOS:
      problems.append(f'{name}.diff has no entry in HOWTOS '
                      f'(howtos/check_diffs.py)')
  for name in HOWTOS:
    if name not in names:
      problems.append(f'{name}.diff is listed in HOWTOS but '
                      f'howtos/diffs/{name}.diff does not exist')
    if not os.path.exists(smoke_path(root, name)):
      problems.append(f'{name}.diff has no smoke test '
                      f'(howtos/smoke/{name}.py)')
  return problems


def smoke_path(root, name):
  return os.path.join(root, 'howtos', 'smoke', name + '.py')


def _ignore(_, names):
  return [n for n in names
          if n == '__pycache__' or n.endswith(('.pyc', '.rej', '.orig'))]


def apply_diff(root, name, workdir):
  """Copies ``root/examples`` to ``workdir`` and applies the diff there."""
  diff = os.path.join(root, 'howtos', 'diffs', name + '.diff')
  shutil.copytree(os.path.join(root, 'examples'),
                  os.path.join(workdir, 'examples'), ignore=_ignore)
  # A repository of its own, so that git applies paths from workdir (and not
  # from an enclosing checkout that TMPDIR might be inside).
  subprocess.run(['git', 'init', '-q', workdir], check=True,
                 capture_output=True)
  run = subprocess.run(['git', 'apply', '--check', diff], cwd=workdir,
                       capture_output=True, text=True)
  if run.returncode != 0:
    raise CheckError(
        f'{name}.diff no longer applies to the current examples:\n'
        f'{run.stderr.strip()}\n'
        f'Regenerate it: apply it with `git apply --3way` (or --reject), fix '
        f'the conflicts, then write `git diff` of the example back to '
        f'howtos/diffs/{name}.diff (see howtos/README.md).')
  subprocess.run(['git', 'apply', diff], cwd=workdir, check=True,
                 capture_output=True)


def smoke_env(example_dir, devices, root, cache_dir):
  """The environment of a smoke test: CPU, ``devices`` devices, offline."""
  env = dict(os.environ)
  env['JAX_PLATFORMS'] = 'cpu'
  env.setdefault('FLAXLEGACY_OFFLINE', '1')
  env.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  env['PYTHONUNBUFFERED'] = '1'
  xla = re.sub(r'--xla_force_host_platform_device_count=\S+', '',
               env.get('XLA_FLAGS', '')).strip()
  env['XLA_FLAGS'] = (
      f'{xla} --xla_force_host_platform_device_count={devices}'.strip())
  # One persistent compilation cache for all smoke tests of a run: they
  # build many of the same programs (the model's init, the steps the example
  # tests and main share), which are then compiled once.  Set
  # JAX_COMPILATION_CACHE_DIR to share one between runs.
  env.setdefault('JAX_COMPILATION_CACHE_DIR', cache_dir)
  env.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0')
  env.setdefault('JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES', '0')
  path = [example_dir, os.path.join(root, 'howtos', 'smoke')]
  if env.get('PYTHONPATH'):
    path.append(env['PYTHONPATH'])
  env['PYTHONPATH'] = os.pathsep.join(path)
  return env


def run_smoke(root, name, workdir, timeout, cache_dir):
  """Runs the smoke test in the patched example; returns its output."""
  howto = HOWTOS[name]
  example_dir = os.path.join(workdir, howto.example)
  try:
    run = subprocess.run(
        [sys.executable, smoke_path(root, name)], cwd=example_dir,
        env=smoke_env(example_dir, howto.devices, root, cache_dir),
        capture_output=True, text=True, timeout=timeout)
  except subprocess.TimeoutExpired as e:
    out = (e.stdout or b'').decode(errors='replace') if isinstance(
        e.stdout, bytes) else (e.stdout or '')
    raise CheckError(f'{name}.diff: the patched program\'s smoke test did '
                     f'not finish in {timeout} s\n{out[-3000:]}') from e
  out = run.stdout + run.stderr
  if run.returncode != 0 or RESULT_PREFIX not in run.stdout:
    raise CheckError(
        f'{name}.diff: the patched program\'s smoke test failed '
        f'(exit status {run.returncode}); last output:\n{out[-6000:]}')
  return run.stdout


def check(root, name, cache_dir, keep=None, timeout=900):
  """Applies and smoke-tests one HOWTO; returns its SMOKE-RESULT line."""
  workdir = tempfile.mkdtemp(prefix=f'howto-{name}-')
  try:
    apply_diff(root, name, workdir)
    out = run_smoke(root, name, workdir, timeout, cache_dir)
    if keep:
      target = os.path.join(keep, name)
      shutil.rmtree(target, ignore_errors=True)
      shutil.copytree(os.path.join(workdir, 'examples'),
                      os.path.join(target, 'examples'), ignore=_ignore)
    return [l for l in out.splitlines() if l.startswith(RESULT_PREFIX)][-1]
  finally:
    shutil.rmtree(workdir, ignore_errors=True)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('names', nargs='*',
                      help='HOWTOs to check (default: all diffs)')
  parser.add_argument('--root', default=REPO,
                      help='repository root (default: this checkout)')
  parser.add_argument('--keep', help='copy each patched example here')
  parser.add_argument('--timeout', type=int, default=900,
                      help='seconds per smoke test')
  parser.add_argument('--jobs', type=int, default=1,
                      help='smoke tests run at once (one core each, mostly)')
  parser.add_argument('--json', help='also write {name: outcome} here')
  args = parser.parse_args(argv)
  root = os.path.abspath(args.root)

  problems = check_table(root)
  for problem in problems:
    print(f'FAIL {problem}', flush=True)
  available = diff_names(root)
  names = args.names or [n for n in HOWTOS if n in available]
  unknown = [n for n in names if n not in HOWTOS or n not in available]
  for n in unknown:
    print(f'FAIL {n}.diff: no such HOWTO (known: {", ".join(available)})',
          flush=True)
  outcomes = {}
  lock = threading.Lock()
  cache_dir = tempfile.mkdtemp(prefix='howto-jax-cache-')

  def run(name):
    start = time.time()
    try:
      result = check(root, name, cache_dir, keep=args.keep,
                     timeout=args.timeout)
      line = f'ok   {name}.diff ({time.time() - start:.0f} s) {result}'
      outcome = {'ok': True, 'message': line,
                 'result': json.loads(result[len(RESULT_PREFIX):])}
    except CheckError as e:
      line = f'FAIL {e}'
      outcome = {'ok': False, 'message': line}
    with lock:  # one report at a time, never interleaved
      outcomes[name] = outcome
      print(line, flush=True)

  try:
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
      for future in [pool.submit(run, n) for n in names if n not in unknown]:
        future.result()
  finally:
    shutil.rmtree(cache_dir, ignore_errors=True)
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(outcomes, f, indent=1, sort_keys=True)
  failed = (len(problems) + len(unknown) +
            sum(not o['ok'] for o in outcomes.values()))
  if failed:
    print(f'{failed} HOWTO check(s) failed', flush=True)
  return 1 if failed else 0


if __name__ == '__main__':
  sys.exit(main())
