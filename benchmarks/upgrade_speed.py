"""Speed of ``flaxlegacy upgrade`` on a ~10,000-line legacy codebase.

    python benchmarks/upgrade_speed.py [--lines 10000] [--src DIR ...]

Builds a synthetic codebase by copying legacy sources -- the project's
examples/ and, where shared/ sits beside the checkout, the conformance
generators; with ``LEGACY_FLAX_GIT`` set, legacy Flax's v0.2 examples too --
into numbered package folders until it holds ``--lines`` lines, then times
one ``upgrade_paths`` run (facts, rules, report, writing DST; no
verification) and prints lines, files, seconds and lines per second.
"""

import argparse
import io
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from flaxlegacy.upgrade import api  # pylint: disable=g-import-not-at-top,wrong-import-position


def _sources(tmp):
  srcs = [os.path.join(ROOT, 'examples')]
  gens = os.path.join(os.path.dirname(ROOT), 'shared', 'conformance')
  if os.path.isdir(gens):
    d = os.path.join(tmp, 'generators')
    os.makedirs(d)
    for f in os.listdir(gens):
      if f.startswith('gen_') and f.endswith('.py'):
        shutil.copy(os.path.join(gens, f), d)
    srcs.append(d)
  git = os.environ.get('LEGACY_FLAX_GIT')
  if git:
    data = subprocess.run(['git', '-C', git, 'archive', 'v0.2', 'examples'],
                          capture_output=True, check=True).stdout
    d = os.path.join(tmp, 'legacy_v0_2')
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
      tar.extractall(d)  # nosec: our own mirror
    srcs.append(os.path.join(d, 'examples'))
  return srcs


def _py_lines(path):
  n = 0
  for dirpath, _, files in os.walk(path):
    for f in files:
      if f.endswith('.py'):
        with open(os.path.join(dirpath, f), encoding='utf-8') as fh:
          n += sum(1 for _ in fh)
  return n


def build(tmp, lines, srcs=None):
  srcs = srcs or _sources(tmp)
  code = os.path.join(tmp, 'codebase')
  os.makedirs(code)
  total, copy = 0, 0
  while total < lines:
    for i, s in enumerate(srcs):
      dst = os.path.join(code, f'pkg{copy}', f'{i}_{os.path.basename(s)}')
      shutil.copytree(s, dst, ignore=shutil.ignore_patterns('__pycache__'))
      total += _py_lines(dst)
    copy += 1
  return code, total


def _cpu():
  """CPU seconds of this process and its (forked, waited-for) workers."""
  own = resource.getrusage(resource.RUSAGE_SELF)
  kids = resource.getrusage(resource.RUSAGE_CHILDREN)
  return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--lines', type=int, default=10000)
  parser.add_argument('--src', nargs='*', help='legacy source folders to '
                      'replicate (default: see the module docstring)')
  args = parser.parse_args(argv)
  with tempfile.TemporaryDirectory() as tmp:
    code, total = build(tmp, args.lines, args.src)
    files = sum(len([f for f in fs if f.endswith('.py')])
                for _, _, fs in os.walk(code))
    start = time.perf_counter()
    cpu = _cpu()
    status, report = api.upgrade_paths([code], out=os.path.join(tmp, 'out'))
    wall = time.perf_counter() - start
    cpu = _cpu() - cpu
  s = report['summary']
  print(f'upgrade: {total} lines, {files} Python files, '
        f"{s['modules_rewritten']} module classes, {s['todos']} TODOs: "
        f'{wall:.2f} s wall, {cpu:.2f} s CPU (all processes), '
        f'{total / wall:.0f} lines/s '
        f'(exit {status})')
  return 0


if __name__ == '__main__':
  sys.exit(main())
