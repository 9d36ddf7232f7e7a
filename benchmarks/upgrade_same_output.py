"""Does this checkout's ``flaxlegacy upgrade`` write what BASE's writes?

    python benchmarks/upgrade_same_output.py [--base main] [--lines 10000]

For speed work, whose output must not change.  Extracts BASE (a git
revision of this repository) into a temporary directory, then upgrades the
same inputs with BASE's flaxlegacy and with this checkout's: the synthetic
codebase of ``upgrade_speed.py`` and copies of tests/, examples/, howtos/
and (where shared/ sits beside the checkout) the conformance generators,
one ``upgrade_paths`` run each, plus one run with two SRC arguments.  Every
output tree (upgrade.json included) is compared byte for byte; prints each
difference and exits 1 if there is one.  Prints the CPU seconds of both
sides too.
"""

import argparse
import difflib
import filecmp
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import upgrade_speed  # pylint: disable=g-import-not-at-top,wrong-import-position

# Runs in a fresh interpreter: flaxlegacy from CODE_ROOT (not the installed
# one, which a .pth may already have imported), then one upgrade_paths run.
_RUN = r'''
import os, resource, sys, time
root = sys.argv[1]
sys.path.insert(0, root)
sys.meta_path = [f for f in sys.meta_path
                 if 'editable' not in repr(f).lower()
                 and 'flaxlegacy' not in repr(f)]
for m in [m for m in sys.modules
          if m == 'flaxlegacy' or m.startswith('flaxlegacy.')]:
  del sys.modules[m]
from flaxlegacy.upgrade import api
assert api.__file__.startswith(root), api.__file__
cpu = time.process_time()
status, _ = api.upgrade_paths(sys.argv[3:], out=sys.argv[2])
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
print(time.process_time() - cpu + kids.ru_utime + kids.ru_stime)
sys.exit(status)
'''


def _differences(a, b, rel=''):
  cmp = filecmp.dircmp(a, b)
  out = [os.path.join(rel, n) + ' (only one side)'
         for n in cmp.left_only + cmp.right_only + cmp.funny_files]
  _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
  out += [os.path.join(rel, n) for n in mismatch + errors]
  for d in cmp.common_dirs:
    out += _differences(os.path.join(a, d), os.path.join(b, d),
                        os.path.join(rel, d))
  return out


def _show(a, b, limit):
  """The first ``limit`` lines of a unified diff of two output files
  (upgrade.json pretty-printed, so a changed entry shows as one)."""
  if limit <= 0:
    return
  texts = []
  for path in (a, b):
    with open(path, encoding='utf-8', errors='replace') as f:
      text = f.read()
    if path.endswith('.json'):
      try:
        text = json.dumps(json.loads(text), indent=1, sort_keys=True)
      except ValueError:
        pass
    texts.append(text.splitlines())
  lines = list(difflib.unified_diff(texts[0], texts[1], 'base', 'this',
                                    lineterm='', n=2))
  for line in lines[:limit]:
    print('   ', line)
  if len(lines) > limit:
    print(f'    ... {len(lines) - limit} more diff lines')


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--base', default='main')
  parser.add_argument('--lines', type=int, default=10000)
  parser.add_argument('--show', type=int, default=40, help='lines of diff '
                      'to print per differing file (0: none)')
  args = parser.parse_args(argv)
  with tempfile.TemporaryDirectory() as tmp:
    base = os.path.join(tmp, 'base')
    os.makedirs(base)
    archive = subprocess.run(['git', '-C', ROOT, 'archive', args.base],
                             capture_output=True, check=True).stdout
    subprocess.run(['tar', '-x', '-C', base], input=archive, check=True)
    inputs = os.path.join(tmp, 'in')
    os.makedirs(inputs)
    code, total = upgrade_speed.build(inputs, args.lines)
    runs = {'codebase': [code]}
    for name in ('tests', 'examples', 'howtos'):
      shutil.copytree(os.path.join(ROOT, name), os.path.join(inputs, name),
                      ignore=shutil.ignore_patterns('__pycache__'))
      runs[name] = [os.path.join(inputs, name)]
    gens = os.path.join(os.path.dirname(ROOT), 'shared', 'conformance')
    if os.path.isdir(gens):
      shutil.copytree(gens, os.path.join(inputs, 'conformance'),
                      ignore=shutil.ignore_patterns('__pycache__'))
      runs['conformance'] = [os.path.join(inputs, 'conformance')]
    runs['two_srcs'] = runs['examples'] + runs['howtos']
    diffs = []
    for name, srcs in runs.items():
      cpu = {}
      for side, root in (('base', base), ('this', ROOT)):
        out = os.path.join(tmp, 'out-' + side, name)
        done = subprocess.run([sys.executable, '-c', _RUN, root, out] + srcs,
                              capture_output=True, text=True, check=False)
        if done.returncode not in (0, 1, 3) or not done.stdout.strip():
          sys.stderr.write(done.stdout + done.stderr)
          raise SystemExit(f'{side}: upgrade of {name} failed')
        cpu[side] = float(done.stdout.split()[-1])
      d = _differences(os.path.join(tmp, 'out-base', name),
                       os.path.join(tmp, 'out-this', name), name)
      diffs += d
      print(f'{name}: {"same" if not d else f"{len(d)} files differ"} '
            f'(CPU s: {args.base} {cpu["base"]:.2f}, this {cpu["this"]:.2f})')
    print(f'synthetic codebase: {total} lines')
    for d in diffs:
      print('differs:', d)
      if not d.endswith(' (only one side)'):
        _show(os.path.join(tmp, 'out-base', d), os.path.join(tmp, 'out-this', d),
              args.show)
  return 1 if diffs else 0


if __name__ == '__main__':
  sys.exit(main())
