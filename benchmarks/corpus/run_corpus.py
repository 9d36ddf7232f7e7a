#!/usr/bin/env python3
"""Run real 2020-2021 legacy-Flax codebases' own tests under flaxlegacy and
under the legacy oracle, and record every test's outcome on both sides; a
third side runs them from the codebase as `flaxlegacy upgrade` rewrote it.

Not run by CI (slow, needs local snapshots and extra virtualenvs).
benchmarks/corpus/README.md says how to set it up and rerun it;
docs/corpus.md says what the corpus is and what it found.

    python benchmarks/corpus/run_corpus.py                  # everything, resumable
    python benchmarks/corpus/run_corpus.py --only rigl --side flaxlegacy --force
    python benchmarks/corpus/run_corpus.py --report         # merge + summary only

Everything it needs lives under one cache directory (--cache-dir; default
$FLAXLEGACY_CORPUS_CACHE, else $XDG_CACHE_HOME/flaxlegacy-corpus, else
~/.cache/flaxlegacy-corpus):

    CACHE/mirrors/<owner>+<name>/repo   bare git mirrors of the codebases
    CACHE/envs/flaxlegacy               the flaxlegacy side's interpreter
    CACHE/envs/oracle-0.3.5, -0.3.6     the legacy oracle's interpreters
    CACHE/envs/upgraded                 the upgraded side's: no flaxlegacy
    CACHE/work                          extracted codebases, TFDS data, tmp

(setup_envs.sh builds the envs there; every path can also be given on its
own.)  Each codebase (benchmarks/corpus/corpus.json) is extracted at its
pinned commit from its local bare mirror (`git archive`, no network), then
each of its test files runs unchanged as `python -m pytest FILE` in a process
of its own, one at a time, with a per-file timeout; the outcome of every test
case comes from pytest's JUnit XML. One JSON per (codebase, side, file) lands
under --results, so an interrupted run resumes where it stopped (--force
reruns).

The sides are parameters: --flaxlegacy-python / --flaxlegacy-path (the
checkout put first on PYTHONPATH; default: the checkout holding this file) /
--flaxlegacy-env KEY=VAL, and --oracle-python VERSION=PYTHON for each legacy
Flax version a codebase asks for (0.3.5 for `from flax import nn`).

The third side, `--side upgraded`, runs `python -m flaxlegacy upgrade SRC
--out WORK/name/upgraded` with the flaxlegacy side's python and checkout,
records the upgrade's summary (files, TODOs, upgrade.json) and then runs the
same test files from the upgraded tree with --upgraded-python, an
environment where flaxlegacy is not installed (checked before each codebase:
`import flaxlegacy` must fail there), with FLAXLEGACY=off and nothing of
flaxlegacy on PYTHONPATH (the upgraded tree carries the helpers it uses,
legacy_helpers.py). `--upgraded-path DIR` puts DIR first on its
PYTHONPATH (e.g. a flaxlegacy checkout, to measure output that still needs
flaxlegacy's shipped modules); the records say which.
`--side both` still means flaxlegacy and oracle; `--side all` adds upgraded.
"""

import argparse
import collections
import fnmatch
import glob
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import io
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.dirname(os.path.dirname(HERE))   # this flaxlegacy checkout
DEFAULT_CORPUS = os.path.join(HERE, 'corpus.json')
DEFAULT_RESULTS = os.path.join(HERE, 'results')
SIDES = ('flaxlegacy', 'oracle')   # the pair the classes below compare
UPGRADED = 'upgraded'               # the third side: the upgraded codebase
ALL_SIDES = SIDES + (UPGRADED,)

# One thread each: the machine is shared; tests run strictly one at a time.
BASE_ENV = {
    'JAX_PLATFORMS': 'cpu',
    'TF_CPP_MIN_LOG_LEVEL': '3',
    'OMP_NUM_THREADS': '1',
    'TF_NUM_INTRAOP_THREADS': '1',
    'TF_NUM_INTEROP_THREADS': '1',
    'PYTHONDONTWRITEBYTECODE': '1',
    'PYTHONHASHSEED': '0',
    'CUDA_VISIBLE_DEVICES': '',
}


def parse_kv(items):
  out = {}
  for item in items or ():
    if '=' not in item:
      raise SystemExit('expected KEY=VALUE, got %r' % item)
    k, v = item.split('=', 1)
    out[k] = v
  return out


def load_corpus(path):
  with open(path) as f:
    corpus = json.load(f)
  names = [c['name'] for c in corpus['codebases']]
  if len(set(names)) != len(names):
    raise SystemExit('corpus.json: duplicate codebase names')
  return corpus


def default_cache_dir():
  """$FLAXLEGACY_CORPUS_CACHE, $XDG_CACHE_HOME/flaxlegacy-corpus or
  ~/.cache/flaxlegacy-corpus (setup_envs.sh uses the same rule)."""
  if os.environ.get('FLAXLEGACY_CORPUS_CACHE'):
    return os.environ['FLAXLEGACY_CORPUS_CACHE']
  xdg = os.environ.get('XDG_CACHE_HOME') or os.path.join(
      os.path.expanduser('~'), '.cache')
  return os.path.join(xdg, 'flaxlegacy-corpus')


def _git(gitdir, *argv):
  return subprocess.run(['git', '--git-dir', gitdir] + list(argv),
                        capture_output=True, text=True)


def mirror_dir(cb, args):
  """The first ROOT/<owner>+<name>/repo (or ROOT/<owner>+<name>, bare) under
  the --mirror-root list that is a git directory."""
  tried = []
  for root in args.mirror_root:
    for d in (os.path.join(root, cb['mirror'], 'repo'),
              os.path.join(root, cb['mirror'])):
      tried.append(d)
      if os.path.isdir(os.path.join(d, 'objects')):
        return d
  url = 'https://github.com/%s' % cb['repo']
  how = ('git clone --bare %s %s' % (url, tried[0]))
  if cb.get('rebuilt'):
    how = ('git clone --bare --filter=blob:none %s %s   (a partial clone: '
           'the monorepo is large), or rebuild the snapshot as '
           'benchmarks/corpus/README.md says' % (url, tried[0]))
  raise SystemExit('%s: no local mirror of %s (looked in %s); make one with:\n'
                   '  %s' % (cb['name'], cb['repo'], ', '.join(tried), how))


def resolve_rev(cb, gitdir):
  """(rev, rebuilt): the pinned commit itself where the mirror has it (a
  clone of the upstream repository), else the snapshot rebuilt from the tool
  library's file index, ref refs/rebuilt/<commit> (README.md: snapshots)."""
  commit = cb['commit']
  if _git(gitdir, 'cat-file', '-e', commit + '^{commit}').returncode == 0:
    return commit, False
  ref = 'refs/rebuilt/' + commit
  if _git(gitdir, 'rev-parse', '--verify', '-q', ref).returncode == 0:
    return ref, True
  raise SystemExit('%s: mirror %s has neither commit %s nor %s (fetch it '
                   'again, or rebuild the snapshot)' % (cb['name'], gitdir,
                                                        commit, ref))


def extract(cb, corpus, args):
  """Extracts cb's paths at its commit into WORK/name/src (idempotent)."""
  del corpus
  dest = os.path.join(args.workdir, cb['name'], 'src')
  stamp = os.path.join(args.workdir, cb['name'], 'EXTRACTED')
  gitdir = mirror_dir(cb, args)
  rev, rebuilt = resolve_rev(cb, gitdir)
  tree = _git(gitdir, 'rev-parse', rev + '^{tree}').stdout.strip()
  want = '%s %s %s' % (cb['commit'], tree, ' '.join(cb['paths']))
  cb['_snapshot'] = {'rev': rev, 'tree': tree, 'rebuilt': rebuilt}
  if os.path.exists(stamp) and open(stamp).read() == want:
    return dest
  if os.path.exists(dest):
    shutil.rmtree(dest)
  os.makedirs(dest)
  target = os.path.join(dest, cb.get('prefix', ''))
  os.makedirs(target, exist_ok=True)
  data = subprocess.run(
      ['git', '--git-dir', gitdir, 'archive', rev, '--'] +
      cb['paths'], check=True, capture_output=True).stdout
  with tarfile.open(fileobj=io.BytesIO(data)) as tar:
    tar.extractall(target, filter='data')
  with open(stamp, 'w') as f:
    f.write(want)
  return dest


def test_files(cb, src):
  files = set()
  for pattern in cb['tests']:
    for p in glob.glob(os.path.join(src, pattern), recursive=True):
      files.add(os.path.relpath(p, src))
  return sorted(files)


def side_command(side, cb, args):
  """(python, extra PYTHONPATH entries first, extra env) for one side."""
  if side == 'flaxlegacy':
    env = dict(cb.get('flaxlegacy_env', {}))   # e.g. pure linen: FLAXLEGACY=on
    env.update(parse_kv(args.flaxlegacy_env))
    return args.flaxlegacy_python, [args.flaxlegacy_path], env
  if side == UPGRADED:
    env = {'FLAXLEGACY': 'off'}
    env.update(parse_kv(args.upgraded_env))
    return args.upgraded_python, list(args.upgraded_path or ()), env
  version = cb.get('oracle', '0.3.5')
  pythons = parse_kv(args.oracle_python)
  if version not in pythons:
    raise SystemExit('%s wants oracle flax %s: pass --oracle-python %s=PYTHON'
                     % (cb['name'], version, version))
  return pythons[version], [], parse_kv(args.oracle_env)


_ERR_LINE = re.compile(r'^E\s+(.*)$')
_EXC_LINE = re.compile(r'^[\w.]+(Error|Exception|Exit|Interrupt|Warning)\b')


def _detail(text, message):
  """The most telling line of a failure: the last `E   Xxx: ...` line."""
  lines = [m.group(1) for m in map(_ERR_LINE.match, (text or '').splitlines())
           if m]
  named = [l for l in lines if re.match(r'^[\w.]+(Error|Exception|Exit|'
                                        r'Interrupt|Warning)\b', l)]
  if not lines:  # not pytest's format (absltest's XML): the traceback itself
    raw = [l.strip() for l in (text or '').splitlines() if l.strip()]
    named = [l for l in raw if _EXC_LINE.match(l)]
    lines = raw
  pick = named[-1] if named else (lines[-1] if lines else (message or ''))
  return pick.strip()[:400]


def parse_junit(path, relfile):
  tree = ET.parse(path)
  cases = []
  for tc in tree.iter('testcase'):
    classname = tc.get('classname', '')
    name = tc.get('name', '')
    outcome, detail = 'passed', ''
    if tc.get('result') in ('suppressed', 'skipped') or (
        tc.get('status') == 'notrun'):   # absltest's XML for a skipped test
      outcome = 'skipped'
    for child in tc:
      if child.tag in ('failure', 'error'):
        outcome = 'failed' if child.tag == 'failure' else 'error'
        detail = _detail(child.text, child.get('message'))
        break
      if child.tag == 'skipped':
        outcome = 'skipped'
        detail = (child.get('message') or '')[:400]
        break
    if not classname and name:   # collection error: pytest names the file
      test_id = relfile + '::<collection>'
    else:
      test_id = relfile + '::' + classname.split('.')[-1] + '::' + name
    cases.append({'id': test_id, 'outcome': outcome, 'detail': detail})
  return cases


def run_file(cb, side, relfile, src, args, more_env=None):
  python, pre_path, extra_env = side_command(side, cb, args)
  extra_env = dict(extra_env, **(more_env or {}))
  check_python(python, '%s side (%s)' % (side, cb['name']))
  env = dict(os.environ)
  for k in ('PYTHONPATH', 'XLA_FLAGS', 'FLAXLEGACY', 'VIRTUAL_ENV'):
    env.pop(k, None)
  env.update(BASE_ENV)
  env['HOME'] = os.path.join(args.workdir, 'home')
  env['TFDS_DATA_DIR'] = os.path.join(args.workdir, 'tfds')
  env['TMPDIR'] = os.path.join(args.workdir, cb['name'], 'tmp-' + side)
  for d in (env['HOME'], env['TFDS_DATA_DIR'], env['TMPDIR']):
    os.makedirs(d, exist_ok=True)
  env.update(cb.get('env', {}))
  env.update(extra_env)
  env['PYTHONPATH'] = os.pathsep.join(
      pre_path + [os.path.join(src, p) for p in cb.get('pythonpath', ['.'])])
  xml = os.path.join(args.workdir, cb['name'], 'junit-%s.xml' % side)
  if os.path.exists(xml):
    os.remove(xml)
  # A codebase may run from a subdirectory (`cwd`, e.g. one whose tests read
  # data relative to it); pytest then gets the file relative to that.
  cwd = os.path.join(src, cb.get('cwd', '.'))
  target = os.path.relpath(os.path.join(src, relfile), cwd)
  if cb.get('harness', 'pytest') == 'absltest':
    # The file's own `absltest.main()` (flags parsed, as its authors ran it),
    # JUnit XML from absl's reporter.
    module = relfile[:-3].replace('/', '.')
    cmd = ['nice', '-n', '10', python, '-m', module, '--xml_output_file=' + xml]
  else:
    cmd = ['nice', '-n', '10', python, '-m', 'pytest', target, '-q', '-rA',
           '-p', 'no:cacheprovider', '--junitxml', xml,
           '-o', 'junit_family=xunit1', '--rootdir', src] + cb.get(
               'pytest_args', [])
  commit = (_checkout_commit(args.flaxlegacy_path)
            if side in ('flaxlegacy', UPGRADED) else None)
  start = time.time()
  proc = subprocess.Popen(cmd, cwd=cwd,
                          env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, start_new_session=True)
  timed_out = False
  try:
    out, _ = proc.communicate(timeout=args.timeout)
  except subprocess.TimeoutExpired:
    timed_out = True
    os.killpg(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate()
  elapsed = round(time.time() - start, 1)
  tail = out.decode('utf-8', 'replace').splitlines()[-15:]
  record = {'codebase': cb['name'], 'side': side, 'file': relfile,
            'returncode': proc.returncode, 'seconds': elapsed,
            'timed_out': timed_out, 'tail': tail,
            'python': python, 'env': dict(extra_env)}
  if side in ('flaxlegacy', UPGRADED):
    record['flaxlegacy_commit'] = commit
  if side == UPGRADED:
    record['pythonpath_first'] = list(pre_path)
  if cb.get('_snapshot'):
    record['snapshot'] = cb['_snapshot']
  if not timed_out and os.path.exists(xml):
    record['cases'] = parse_junit(xml, relfile)
  else:
    exc = [l.strip() for l in tail if _EXC_LINE.match(l.strip())]
    why = ('timeout after %ds' % args.timeout) if timed_out else (
        exc[-1][:400] if exc else 'no JUnit XML (exit %s): %s' % (
            proc.returncode, ' | '.join(tail[-3:])[:400]))
    record['cases'] = [{'id': relfile + '::<collection>', 'outcome': 'error',
                        'detail': why}]
  return record


def check_python(python, what):
  if not (os.path.isfile(python) and os.access(python, os.X_OK)):
    raise SystemExit('%s: no interpreter at %s (build the environments with '
                     'benchmarks/corpus/setup_envs.sh, or pass the option)'
                     % (what, python))


def flaxlegacy_importable(args):
  """Whether `import flaxlegacy` works on the upgraded side as it runs the
  tests (same interpreter, same PYTHONPATH; cwd outside any checkout)."""
  env = dict(os.environ)
  for k in ('PYTHONPATH', 'FLAXLEGACY', 'VIRTUAL_ENV'):
    env.pop(k, None)
  if args.upgraded_path:
    env['PYTHONPATH'] = os.pathsep.join(args.upgraded_path)
  proc = subprocess.run(
      [args.upgraded_python, '-c',
       'import importlib.util, sys; '
       'sys.exit(0 if importlib.util.find_spec("flaxlegacy") else 3)'],
      env=env, cwd=args.workdir, capture_output=True, text=True)
  if proc.returncode not in (0, 3):
    raise SystemExit('upgraded side: %s does not start: %s' % (
        args.upgraded_python, proc.stderr[-1000:]))
  return proc.returncode == 0


def _checkout_commit(path):
  try:
    return subprocess.run(['git', '-C', path, 'rev-parse', 'HEAD'],
                          capture_output=True, text=True,
                          check=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return None


def result_path(args, name, side, relfile):
  slug = relfile.replace('/', '__')
  return os.path.join(args.results, 'raw', name, side, slug + '.json')


def prepare_data(args):
  """TFDS mnist for both sides: flaxlegacy's offline stand-in (no network)."""
  tfds_dir = os.path.join(args.workdir, 'tfds')
  if os.path.isdir(os.path.join(tfds_dir, 'mnist')):
    return
  env = dict(os.environ, PYTHONPATH=args.flaxlegacy_path)
  subprocess.run([args.flaxlegacy_python, '-m', 'flaxlegacy', 'data', 'mnist',
                  '--data_dir', tfds_dir], check=True, env=env)


def observe_command(cb, src, args):
  """The shell command ``flaxlegacy upgrade --observe`` runs: the selected
  test files on the flaxlegacy side, each as run_file runs it (that side's
  interpreter, environment and working directory; the hook's PYTHONPATH,
  which the upgrade puts first, kept in front), one after another."""
  python, _, extra_env = side_command('flaxlegacy', cb, args)
  files = test_files(cb, src)
  if args.files:
    files = [f for f in files if any(fnmatch.fnmatch(f, g)
                                     for g in args.files)]
  skip = cb.get('skip_files', {})
  env = {'HOME': os.path.join(args.workdir, 'home'),
         'TFDS_DATA_DIR': os.path.join(args.workdir, 'tfds'),
         'TMPDIR': os.path.join(args.workdir, cb['name'], 'tmp-observe')}
  for d in env.values():
    os.makedirs(d, exist_ok=True)
  env.update(cb.get('env', {}))
  env.update(extra_env)
  paths = os.pathsep.join(os.path.join(src, p)
                          for p in cb.get('pythonpath', ['.']))
  cwd = os.path.join(src, cb.get('cwd', '.'))
  parts = []
  for relfile in files:
    if relfile in skip:
      continue
    if cb.get('harness', 'pytest') == 'absltest':
      argv = [python, '-m', relfile[:-3].replace('/', '.')]
    else:
      argv = [python, '-m', 'pytest', os.path.relpath(
          os.path.join(src, relfile), cwd), '-q', '-p', 'no:cacheprovider',
              '--rootdir', src] + cb.get('pytest_args', [])
    parts.append('timeout %d env %s PYTHONPATH="$PYTHONPATH%s%s" %s' % (
        args.timeout, ' '.join(shlex.quote('%s=%s' % kv)
                               for kv in sorted(env.items())),
        os.pathsep, paths, ' '.join(shlex.quote(a) for a in argv)))
  return 'cd %s && { %s; }' % (shlex.quote(cwd), '; '.join(parts) or 'true')


def upgrade_tree(cb, src, args):
  """`flaxlegacy upgrade SRC --out WORK/name/upgraded`; its summary."""
  dest = os.path.join(args.workdir, cb['name'], 'upgraded')
  if os.path.exists(dest):
    shutil.rmtree(dest)
  env = dict(os.environ)
  for k in ('PYTHONPATH', 'FLAXLEGACY', 'VIRTUAL_ENV'):
    env.pop(k, None)
  env.update(BASE_ENV)
  env['PYTHONPATH'] = args.flaxlegacy_path
  cmd = ['nice', '-n', '10', args.flaxlegacy_python, '-m', 'flaxlegacy',
         'upgrade', src, '--out', dest]
  if getattr(args, 'observe', False):
    cmd += ['--observe', observe_command(cb, src, args)]
  start = time.time()
  proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
  summary = {'command': ' '.join(shlex.quote(c) for c in cmd[3:]),
             'observe': bool(getattr(args, 'observe', False)),
             'returncode': proc.returncode,
             'seconds': round(time.time() - start, 1),
             'flaxlegacy_commit': _checkout_commit(args.flaxlegacy_path),
             'upgrade_json': os.path.join(dest, 'upgrade.json'),
             'stderr_tail': proc.stderr.splitlines()[-5:]}
  if proc.returncode != 0 or not os.path.exists(summary['upgrade_json']):
    raise SystemExit('%s: flaxlegacy upgrade failed (exit %s):\n%s' % (
        cb['name'], proc.returncode, proc.stderr[-3000:]))
  with open(summary['upgrade_json']) as f:
    report = json.load(f)
  s = report['summary']
  summary.update(files=s['files'], files_changed=s['files_changed'],
                 modules_rewritten=s['modules_rewritten'],
                 rewrites=s['rewrites'], todos=s['todos'],
                 syntax_errors=len(s['syntax_errors']),
                 shipped_modules=report.get('shipped_modules', []))
  # Where the TODOs are: per file, so a failing test can be matched with
  # the TODO the upgrade left in the code it runs.
  summary['todos_by_file'] = {
      path: len(f['left']) for path, f in sorted(report['files'].items())
      if f['left']}
  out = os.path.join(args.results, 'raw', cb['name'], 'upgrade.json')
  os.makedirs(os.path.dirname(out), exist_ok=True)
  with open(out, 'w') as f:
    json.dump(summary, f, indent=1, sort_keys=True)
  print('[upgrade] %s: %d files, %d changed, %d TODOs (%.0fs)' % (
      cb['name'], s['files'], s['files_changed'], s['todos'],
      summary['seconds']), flush=True)
  return dest, summary


def cmd_run(corpus, args):
  sides = {'both': SIDES, 'all': ALL_SIDES}.get(args.side, (args.side,))
  os.makedirs(args.workdir, exist_ok=True)
  # The flaxlegacy side's interpreter also prepares the TFDS data and runs
  # the upgrade.
  check_python(args.flaxlegacy_python, 'flaxlegacy side')
  if UPGRADED in sides:
    check_python(args.upgraded_python, 'upgraded side')
    args.upgraded_has_flaxlegacy = flaxlegacy_importable(args)
    if args.upgraded_has_flaxlegacy and not args.upgraded_path:
      raise SystemExit(
          'upgraded side: flaxlegacy is importable with %s; the upgraded '
          'tree must run where it is not installed (setup_envs.sh builds '
          'CACHE/envs/upgraded without it)' % args.upgraded_python)
  prepare_data(args)
  for cb in corpus['codebases']:
    if args.only and cb['name'] not in args.only:
      continue
    src = extract(cb, corpus, args)
    files = test_files(cb, src)
    if args.files:
      files = [f for f in files if any(fnmatch.fnmatch(f, g)
                                       for g in args.files)]
    skip = cb.get('skip_files', {})
    upgraded = None   # (tree, summary), made once, when a file needs it
    for relfile in files:
      for side in sides:
        out = result_path(args, cb['name'], side, relfile)
        if relfile in skip:
          record = {'codebase': cb['name'], 'side': side, 'file': relfile,
                    'skipped_file': skip[relfile], 'cases': []}
        elif os.path.exists(out) and not args.force:
          continue
        else:
          print('[%s] %s %s ...' % (side, cb['name'], relfile), flush=True)
          if side == UPGRADED:
            if upgraded is None:
              upgraded = upgrade_tree(cb, src, args)
            record = run_file(cb, side, relfile, upgraded[0], args)
            record['upgrade'] = {k: upgraded[1][k] for k in (
                'files', 'files_changed', 'todos', 'upgrade_json')}
            record['flaxlegacy_importable'] = args.upgraded_has_flaxlegacy
          else:
            record = run_file(cb, side, relfile, src, args)
          counts = {}
          for c in record['cases']:
            counts[c['outcome']] = counts.get(c['outcome'], 0) + 1
          print('    %.0fs %s' % (record['seconds'], counts), flush=True)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, 'w') as f:
          json.dump(record, f, indent=1, sort_keys=True)


_ADDRESS = re.compile(r' at 0x[0-9a-fA-F]+')


def _dotted_module(cb, rel):
  """``pkg/sub/mod.py`` -> ``pkg.sub.mod``, relative to the codebase's
  PYTHONPATH entry that holds it."""
  for entry in cb.get('pythonpath', ['.']):
    entry = os.path.normpath(entry)
    if entry == '.' or rel.startswith(entry + os.sep):
      sub = rel if entry == '.' else rel[len(entry) + 1:]
      return sub[:-3].replace(os.sep, '.')
  return None


def verify_codebase(cb, corpus, args):
  """``--verify``: every module class the upgrade rewrote, checked
  numerically (flaxlegacy/upgrade/verify.py) at the shapes and
  hyper-parameters the codebase's own tests initialise it with.

  1. The tests run under the layer (the flaxlegacy side's command) with
     ``FLAXLEGACY_RECORD_INITS``: every top-level legacy initialisation is
     recorded (observe.py ``record_inits``).
  2. For each class of the upgrade's ``modules`` (upgrade.json), each
     recorded initialisation (up to three) is one check: the legacy module
     from the source tree against the upgraded one from the upgraded tree,
     each imported as the codebase imports it.
  A class is "verified" when all its checks match (a class whose outputs
  change with the stochastic key compared with its legacy train /
  deterministic switch set to dropout off, verify.py's docstring); the
  rest are counted by why: a mismatch, an error (on which side), "cannot
  verify: stochastic" (random with no such switch, or still random with
  it), initialised at top level by no
  test (it runs only inside other modules), or only with values a check
  cannot rebuild (a module class as hyper-parameter, a non-array input).
  Writes RESULTS/raw/NAME/verify.json.
  """
  sys.path.insert(0, args.flaxlegacy_path)
  from flaxlegacy.upgrade import observe  # pylint: disable=g-import-not-at-top
  from flaxlegacy.upgrade import verify  # pylint: disable=g-import-not-at-top
  src = extract(cb, corpus, args)
  # the upgrade of this checkout, every time (seconds); the recorded inits
  # are kept across runs (they depend on the layer, not the upgrade) unless
  # --force
  dest, _ = upgrade_tree(cb, src, args)
  with open(os.path.join(dest, 'upgrade.json')) as f:
    modules = json.load(f)['modules']
  inits = os.path.join(args.workdir, cb['name'], 'inits')
  if args.force or not os.path.isdir(inits):
    shutil.rmtree(inits, ignore_errors=True)
    os.makedirs(inits)
    skip = cb.get('skip_files', {})
    for relfile in test_files(cb, src):
      if relfile in skip:
        continue
      print('[inits] %s %s ...' % (cb['name'], relfile), flush=True)
      run_file(cb, 'flaxlegacy', relfile, src, args,
               {observe.INITS_ENV: inits})
  inside = {}
  recorded = observe.read_inits(inits, inside)
  env = dict(os.environ)
  for k in ('PYTHONPATH', 'XLA_FLAGS', 'FLAXLEGACY', 'VIRTUAL_ENV'):
    env.pop(k, None)
  env.update(BASE_ENV)
  env.update(cb.get('env', {}))
  env['HOME'] = os.path.join(args.workdir, 'home')
  env['TMPDIR'] = os.path.join(args.workdir, cb['name'], 'tmp-verify')
  os.makedirs(env['TMPDIR'], exist_ok=True)
  root = os.path.join(src, cb.get('pythonpath', ['.'])[0])
  print('[verify] %s: %d classes rewritten' % (cb['name'], len(modules)),
        flush=True)
  entries = verify.verify_recorded(
      modules, recorded, inside, src, dest, python=args.flaxlegacy_python,
      env=env, dotted=lambda rel: _dotted_module(cb, rel),
      import_roots=(os.path.normpath(root), os.path.normpath(
          os.path.join(dest, os.path.relpath(root, src)))))
  out = os.path.join(args.results, 'raw', cb['name'], 'verify.json')
  os.makedirs(os.path.dirname(out), exist_ok=True)
  with open(out, 'w') as f:
    json.dump({'codebase': cb['name'], 'flaxlegacy_commit': _checkout_commit(
        args.flaxlegacy_path), 'classes': entries}, f, indent=1,
              sort_keys=True)
  counts = collections.Counter(e['status'] for e in entries)
  print('[verify] %s: %d classes: %s' % (cb['name'], len(entries), dict(
      counts)), flush=True)


def _stable_id(test_id):
  """A test id without object addresses (absltest parameterized names carry
  `<function f at 0x7f...>`, different in every process)."""
  return _ADDRESS.sub('', test_id)


def _side_records(args, cb, side, files):
  """(record, its file's entry in `files`) for one side's test files.

  Records the side's run (seconds, timeout, return code) on the entry; a
  file the runner skipped is marked there and not yielded.
  """
  for path in sorted(glob.glob(os.path.join(args.results, 'raw', cb['name'],
                                            side, '*.json'))):
    with open(path) as f:
      rec = json.load(f)
    for case in rec['cases']:
      case['id'] = _stable_id(case['id'])
    fi = files.setdefault(rec['file'], {})
    if 'skipped_file' in rec:
      fi['skipped'] = rec['skipped_file']
      continue
    fi[side] = {'seconds': rec['seconds'], 'timed_out': rec['timed_out'],
                'returncode': rec['returncode']}
    yield rec, fi


def merge(corpus, args):
  """results.json: every test with its outcome on each side, by codebase."""
  merged = {'codebases': {}}
  for cb in corpus['codebases']:
    tests, files = {}, {}
    by_file = {}   # file -> side -> the ids of the cases that side recorded
    for side in SIDES:
      for rec, fi in _side_records(args, cb, side, files):
        if rec.get('flaxlegacy_commit'):
          fi['flaxlegacy_commit'] = rec['flaxlegacy_commit']
        for case in rec['cases']:
          t = tests.setdefault(case['id'], {})
          t[side] = case['outcome']
          if case['outcome'] not in ('passed',):
            t[side + '_detail'] = case['detail']
          by_file.setdefault(rec['file'], {}).setdefault(side, []).append(
              case['id'])
    # A file that one side cannot even collect fails, on that side, every
    # test the other side collected from it.
    for relfile, sides in by_file.items():
      coll = relfile + '::<collection>'
      for side in SIDES:
        other = [i for s in SIDES if s != side for i in sides.get(s, ())
                 if i != coll]
        if sides.get(side) != [coll] or not other:
          continue
        t = tests[coll]
        if any(s in t for s in SIDES if s != side):
          continue   # the other side has a collection outcome of its own
        for test_id in other:
          tests[test_id][side] = t[side]
          tests[test_id][side + '_detail'] = t.get(side + '_detail', '')
        del tests[coll]
    _merge_upgraded(args, cb, tests, files)
    for t in tests.values():
      a, b = t.get('flaxlegacy'), t.get('oracle')
      if a is None or b is None:
        t['class'] = 'incomplete'   # one side has not run this file yet
      elif a == 'passed' and b == 'passed':
        t['class'] = 'both'
      elif b == 'passed' and a != 'passed':
        t['class'] = 'oracle_only'
      elif a == 'passed' and b != 'passed':
        t['class'] = 'flaxlegacy_only'
      else:
        t['class'] = 'neither'
      if UPGRADED in t:
        layer, up = t.get('flaxlegacy') == 'passed', t[UPGRADED] == 'passed'
        t['upgraded_class'] = {(True, True): 'layer_and_upgraded',
                               (True, False): 'layer_not_upgraded',
                               (False, True): 'upgraded_not_layer',
                               (False, False): 'neither'}[layer, up]
    entry = {'repo': cb['repo'], 'commit': cb['commit'], 'files': files,
             'tests': dict(sorted(tests.items()))}
    up = os.path.join(args.results, 'raw', cb['name'], 'upgrade.json')
    if os.path.exists(up):
      with open(up) as f:
        entry['upgrade'] = json.load(f)
    ver = os.path.join(args.results, 'raw', cb['name'], 'verify.json')
    if os.path.exists(ver):
      with open(ver) as f:
        entry['verify'] = json.load(f)
    merged['codebases'][cb['name']] = entry
  with open(os.path.join(args.results, 'results.json'), 'w') as f:
    json.dump(merged, f, indent=1, sort_keys=True)
  return merged


def _merge_upgraded(args, cb, tests, files):
  """Adds the upgraded side's outcome to `tests` (ids as the pair's).

  Kept apart from the pair's merge so that the flaxlegacy / oracle classes
  are computed exactly as before.  A file the upgraded side cannot collect
  fails there every test the pair collected from it.
  """
  for rec, _ in _side_records(args, cb, UPGRADED, files):
    coll = rec['file'] + '::<collection>'
    cases = rec['cases']
    if [c['id'] for c in cases] == [coll]:
      ids = [tid for tid in tests if tid.startswith(rec['file'] + '::')]
      cases = [dict(cases[0], id=tid) for tid in ids] or cases
    for case in cases:
      t = tests.setdefault(case['id'], {})
      t[UPGRADED] = case['outcome']
      if case['outcome'] != 'passed':
        t[UPGRADED + '_detail'] = case['detail']


def summarize(merged):
  total = {}
  print('%-22s %6s %6s %8s %8s %8s %6s' % ('codebase', 'tests', 'both',
                                           'oracle-', 'flaxleg-', 'neither',
                                           'one-side'))
  for name, cb in merged['codebases'].items():
    counts = {'both': 0, 'oracle_only': 0, 'flaxlegacy_only': 0,
              'neither': 0, 'incomplete': 0}
    for t in cb['tests'].values():
      counts[t['class']] += 1
    for k, v in counts.items():
      total[k] = total.get(k, 0) + v
    print('%-22s %6d %6d %8d %8d %8d %6d' % (
        name, sum(counts.values()), counts['both'], counts['oracle_only'],
        counts['flaxlegacy_only'], counts['neither'], counts['incomplete']))
  print('%-22s %6d %6d %8d %8d %8d %6d' % (
      'TOTAL', sum(total.values()), total.get('both', 0),
      total.get('oracle_only', 0), total.get('flaxlegacy_only', 0),
      total.get('neither', 0), total.get('incomplete', 0)))
  print('(oracle-: passes only under legacy Flax = a gap; flaxleg-: passes '
        'only under flaxlegacy)')
  if any('upgrade' in cb for cb in merged['codebases'].values()):
    summarize_upgraded(merged)


def summarize_upgraded(merged):
  """The upgraded side against the flaxlegacy side (the layer)."""
  print()
  print('%-22s %6s %8s %8s %8s %8s %6s' % (
      'codebase', 'tests', 'upgraded', 'layer', 'layer-up', 'up-layer',
      'TODOs'))
  total = {}
  for name, cb in merged['codebases'].items():
    if 'upgrade' not in cb:
      continue
    ts = [t for t in cb['tests'].values() if UPGRADED in t]
    row = {'tests': len(ts),
           'upgraded': sum(t[UPGRADED] == 'passed' for t in ts),
           'layer': sum(t.get('flaxlegacy') == 'passed' for t in ts),
           'layer_not_upgraded': sum(
               t['upgraded_class'] == 'layer_not_upgraded' for t in ts),
           'upgraded_not_layer': sum(
               t['upgraded_class'] == 'upgraded_not_layer' for t in ts),
           'todos': cb['upgrade']['todos']}
    for k, v in row.items():
      total[k] = total.get(k, 0) + v
    print('%-22s %6d %8d %8d %8d %8d %6d' % (
        name, row['tests'], row['upgraded'], row['layer'],
        row['layer_not_upgraded'], row['upgraded_not_layer'], row['todos']))
  print('%-22s %6d %8d %8d %8d %8d %6d' % (
      'TOTAL', total.get('tests', 0), total.get('upgraded', 0),
      total.get('layer', 0), total.get('layer_not_upgraded', 0),
      total.get('upgraded_not_layer', 0), total.get('todos', 0)))
  print('(upgraded: passes from the upgraded tree with FLAXLEGACY=off; layer: '
        'passes under flaxlegacy; layer-up: passes under flaxlegacy but not '
        'upgraded; TODOs: left by the upgrade)')
  summarize_verify(merged)


VERIFY_COLUMNS = ('verified', 'verified inside', 'mismatch', 'error',
                  'cannot verify: stochastic', 'not rebuildable',
                  'not initialised')  # verify.STATUSES
_VERIFY_HEADS = {'verified inside': 'v.inside',
                 'cannot verify: stochastic': 'stochastic',
                 'not rebuildable': 'n.rebuild', 'not initialised': 'n.init'}


def summarize_verify(merged):
  """``--verify``'s table: module classes the upgrade rewrote, by outcome."""
  rows = [(name, cb['verify']) for name, cb in merged['codebases'].items()
          if 'verify' in cb]
  if not rows:
    return
  print()
  print('%-16s %7s ' % ('codebase', 'classes') + ' '.join(
      '%10s' % _VERIFY_HEADS.get(c, c) for c in VERIFY_COLUMNS)
        + '  commit')
  total = collections.Counter()
  for name, ver in rows:
    counts = collections.Counter(e['status'] for e in ver['classes'])
    counts['classes'] = len(ver['classes'])
    total.update(counts)
    print('%-16s %7d ' % (name, counts['classes']) + ' '.join(
        '%10d' % counts[c] for c in VERIFY_COLUMNS) + '  ' + str(
            ver.get('flaxlegacy_commit'))[:7])
  print('%-16s %7d ' % ('TOTAL', total['classes']) + ' '.join(
      '%10d' % total[c] for c in VERIFY_COLUMNS))
  print('(module classes the upgrade rewrote, checked against the legacy '
        'module at the shapes the tests initialise them with; columns: '
        + ', '.join(VERIFY_COLUMNS) + ')')


def _short(test_id):
  return test_id.split('::', 1)[1] if '::' in test_id else test_id


def markdown(corpus, merged):
  """The generated part of docs/corpus.md: per codebase, every test that
  does not pass on both sides, grouped by the pair of failure lines."""
  out = []
  labels = {'oracle_only': 'Pass only under legacy Flax (gaps)',
            'flaxlegacy_only': 'Pass only under flaxlegacy',
            'neither': 'Fail on both sides',
            'incomplete': 'Run on one side only so far'}
  for cb in corpus['codebases']:
    res = merged['codebases'].get(cb['name'])
    if not res:
      continue
    tests = res['tests']
    counts = {}
    for t in tests.values():
      counts[t['class']] = counts.get(t['class'], 0) + 1
    out.append('### %s\n' % cb['name'])
    out.append('%d tests: **%d pass on both sides**, %d only under legacy '
               'Flax, %d only under flaxlegacy, %d on neither%s.\n' % (
                   len(tests), counts.get('both', 0),
                   counts.get('oracle_only', 0),
                   counts.get('flaxlegacy_only', 0), counts.get('neither', 0),
                   (', %d run on one side only so far' % counts['incomplete'])
                   if counts.get('incomplete') else ''))
    if cb.get('pytest_args_why'):
      out.append('Run with `%s`: %s.\n' % (' '.join(cb['pytest_args']),
                                            cb['pytest_args_why']))
    commits = sorted({v['flaxlegacy_commit'][:7] for v in res['files'].values()
                      if v.get('flaxlegacy_commit')})
    if commits:
      out.append('flaxlegacy side: main at %s.\n' % ', '.join(commits))
    skipped = {f: v['skipped'] for f, v in res['files'].items()
               if 'skipped' in v}
    if skipped:
      out.append('Not run: ' + '; '.join('`%s` (%s)' % (f, why)
                                         for f, why in sorted(skipped.items()))
                 + '.\n')
    for klass in ('oracle_only', 'flaxlegacy_only', 'neither', 'incomplete'):
      groups = {}
      for tid, t in tests.items():
        if t['class'] != klass:
          continue
        key = (t.get('flaxlegacy', '-'), t.get('flaxlegacy_detail', ''),
               t.get('oracle', '-'), t.get('oracle_detail', ''))
        groups.setdefault(key, []).append(tid)
      if not groups:
        continue
      out.append('%s:\n' % labels[klass])
      for (fo, fd, oo, od), tids in sorted(groups.items(),
                                           key=lambda kv: kv[1][0]):
        files = sorted({tid.split('::')[0].split('/')[-1] for tid in tids})
        names = ', '.join('`%s`' % _short(t) for t in tids[:6])
        more = ' and %d more' % (len(tids) - 6) if len(tids) > 6 else ''
        out.append('- %d in %s: %s%s' % (len(tids), ', '.join(files), names,
                                         more))
        if fo != 'passed':
          out.append('  - flaxlegacy (%s): `%s`' % (fo, fd.replace('`', "'")[:220]))
        if oo != 'passed':
          out.append('  - oracle (%s): `%s`' % (oo, od.replace('`', "'")[:220]))
      out.append('')
    if 'upgrade' in res:
      out.extend(_markdown_upgraded(res))
  return '\n'.join(out)


def _markdown_upgraded(res):
  up = res['upgrade']
  ts = {tid: t for tid, t in res['tests'].items() if UPGRADED in t}
  out = ['Upgraded (`flaxlegacy upgrade`, %d files, %d changed, %d TODOs; '
         'tests run with FLAXLEGACY=off): %d of %d pass upgraded, %d under '
         'flaxlegacy.\n' % (
             up['files'], up['files_changed'], up['todos'],
             sum(t[UPGRADED] == 'passed' for t in ts.values()), len(ts),
             sum(t.get('flaxlegacy') == 'passed' for t in ts.values()))]
  groups = {}
  for tid, t in ts.items():
    if t['upgraded_class'] == 'layer_not_upgraded':
      key = (t[UPGRADED], t.get(UPGRADED + '_detail', ''))
      groups.setdefault(key, []).append(tid)
  if groups:
    out.append('Pass under flaxlegacy but not upgraded:\n')
    for (uo, ud), tids in sorted(groups.items(), key=lambda kv: kv[1][0]):
      files = sorted({tid.split('::')[0].split('/')[-1] for tid in tids})
      names = ', '.join('`%s`' % _short(t) for t in tids[:6])
      more = ' and %d more' % (len(tids) - 6) if len(tids) > 6 else ''
      out.append('- %d in %s: %s%s' % (len(tids), ', '.join(files), names,
                                       more))
      out.append('  - upgraded (%s): `%s`' % (uo, ud.replace('`', "'")[:220]))
    out.append('')
  ver = res.get('verify')
  if ver:
    counts = collections.Counter(e['status'] for e in ver['classes'])
    out.append('Numeric verification (`--verify`, flaxlegacy %s): %d module '
               'classes rewritten: %s.\n' % (
                   str(ver.get('flaxlegacy_commit'))[:7], len(ver['classes']),
                   ', '.join('%d %s' % (counts[c], c) for c in VERIFY_COLUMNS
                             if counts[c])))
    for e in ver['classes']:
      if e['status'] not in ('verified', 'verified inside',
                             'not initialised'):
        out.append('- `%s` %s: %s: `%s`' % (
            e['file'], e['class'], e['status'],
            str(e.get('detail', '')).replace('`', "'")[:200]))
    out.append('')
  return out


def parse_args(argv=None):
  """The options, every default resolved (under the cache dir or this
  checkout; nothing of a particular machine)."""
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  p.add_argument('--corpus', default=DEFAULT_CORPUS)
  p.add_argument('--results', default=DEFAULT_RESULTS)
  p.add_argument('--cache-dir', default=None,
                 help='where mirrors, environments and work files live '
                 '(default: $FLAXLEGACY_CORPUS_CACHE, else '
                 '$XDG_CACHE_HOME/flaxlegacy-corpus, else '
                 '~/.cache/flaxlegacy-corpus)')
  p.add_argument('--workdir', default=None,
                 help='where codebases are extracted and run '
                 '(default CACHE/work)')
  p.add_argument('--mirror-root', action='append', default=None,
                 help='directory of bare mirrors, ROOT/owner+name/repo '
                 '(repeat to search several; default CACHE/mirrors)')
  p.add_argument('--only', action='append', help='codebase name (repeat)')
  p.add_argument('--files', action='append',
                 help='glob over a codebase\'s test file paths (repeat)')
  p.add_argument('--side', choices=ALL_SIDES + ('both', 'all'),
                 default='both', help='both: flaxlegacy and oracle (the '
                 'default); all: those and upgraded')
  p.add_argument('--force', action='store_true',
                 help='rerun files that already have a result')
  p.add_argument('--timeout', type=int, default=600, help='seconds per file')
  p.add_argument('--flaxlegacy-python', default=None,
                 help='default CACHE/envs/flaxlegacy/bin/python')
  p.add_argument('--flaxlegacy-path', default=CHECKOUT,
                 help='flaxlegacy checkout put first on PYTHONPATH (default: '
                 'the checkout holding this script)')
  p.add_argument('--flaxlegacy-env', action='append',
                 help='KEY=VALUE for the flaxlegacy side, e.g. FLAXLEGACY=on')
  p.add_argument('--oracle-python', action='append',
                 default=None, help='VERSION=PYTHON (repeat; default '
                 '0.3.5=CACHE/envs/oracle-0.3.5/bin/python and 0.3.6 alike)')
  p.add_argument('--oracle-env', action='append')
  p.add_argument('--upgraded-python', default=None,
                 help='interpreter without flaxlegacy for the upgraded tree '
                 '(default CACHE/envs/upgraded/bin/python)')
  p.add_argument('--upgraded-path', action='append', default=None,
                 help='put DIR first on the upgraded side\'s PYTHONPATH '
                 '(repeat; none by default)')
  p.add_argument('--upgraded-env', action='append',
                 help='KEY=VALUE for the upgraded side (FLAXLEGACY=off is '
                 'always set first)')
  p.add_argument('--observe', action='store_true',
                 help='upgrade with `flaxlegacy upgrade --observe`: the '
                 'selected test files run first on the flaxlegacy side and '
                 'what reaches each legacy call site feeds the rewrite '
                 '(use a --workdir and --results of its own to keep the '
                 'static pass\'s results apart)')
  p.add_argument('--verify', action='store_true',
                 help='verify numerically every module class the upgrade '
                 'rewrote, at the shapes the codebase\'s tests initialise '
                 'it with (instead of running tests; see verify_codebase)')
  p.add_argument('--report', action='store_true',
                 help='only merge results and print the summary')
  p.add_argument('--markdown', metavar='PATH',
                 help='also write the per-codebase outcome lists (the '
                 'generated part of docs/corpus.md) to PATH')
  args = p.parse_args(argv)
  args.cache_dir = os.path.abspath(args.cache_dir or default_cache_dir())
  envs = os.path.join(args.cache_dir, 'envs')
  if not args.oracle_python:
    args.oracle_python = ['%s=%s' % (v, os.path.join(envs, 'oracle-' + v,
                                                      'bin', 'python'))
                          for v in ('0.3.5', '0.3.6')]
  args.flaxlegacy_python = args.flaxlegacy_python or os.path.join(
      envs, 'flaxlegacy', 'bin', 'python')
  args.upgraded_python = args.upgraded_python or os.path.join(
      envs, 'upgraded', 'bin', 'python')
  args.mirror_root = [os.path.abspath(r) for r in (
      args.mirror_root or [os.path.join(args.cache_dir, 'mirrors')])]
  args.workdir = os.path.abspath(args.workdir or os.path.join(
      args.cache_dir, 'work'))
  args.flaxlegacy_path = os.path.abspath(args.flaxlegacy_path)
  return args


def main(argv=None):
  args = parse_args(argv)
  corpus = load_corpus(args.corpus)
  if args.verify:
    for cb in corpus['codebases']:
      if not args.only or cb['name'] in args.only:
        verify_codebase(cb, corpus, args)
  elif not args.report:
    cmd_run(corpus, args)
  merged = merge(corpus, args)
  summarize(merged)
  if args.markdown:
    with open(args.markdown, 'w') as f:
      f.write(markdown(corpus, merged))


if __name__ == '__main__':
  main()
