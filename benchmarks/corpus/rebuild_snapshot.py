#!/usr/bin/env python3
"""Build (or check) a local snapshot of a repository too large to clone.

Some corpus codebases live in a monorepo (google-research/google-research,
over 1 GB). Instead of the whole repository, the corpus needs a handful of
files at a few commits; snapshots/<owner>+<name>.json lists them: for each
upstream commit, each file's path, its length in characters and its git blob
hash (so a copy obtained any way can be checked byte for byte).

    # FILES/<commit>/<path> holds the files, obtained any way (a partial
    # clone's `git show COMMIT:PATH`, GitHub's raw view, a file index):
    python3 benchmarks/corpus/rebuild_snapshot.py --files FILES
    # then run_corpus.py finds them in CACHE/mirrors/<owner>+<name>/repo
    # under refs/rebuilt/<commit>.

    python3 benchmarks/corpus/rebuild_snapshot.py --check   # the mirror vs the list

Each upstream commit becomes one commit of the local bare repository holding
exactly the listed files, under refs/rebuilt/<upstream commit>, with a fixed
author and date, so the same files give the same local commit everywhere.
Where the mirror is a real clone (it has the upstream commit itself), --check
compares the listed blob hashes with it instead.

This script holds no code of the snapshot, only the list of what to put in it.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_corpus  # pylint: disable=wrong-import-position

FIXED = {
    'GIT_AUTHOR_NAME': 'flaxlegacy corpus snapshot',
    'GIT_AUTHOR_EMAIL': 'corpus@flaxlegacy.invalid',
    'GIT_AUTHOR_DATE': '2021-01-01T00:00:00+0000',
    'GIT_COMMITTER_NAME': 'flaxlegacy corpus snapshot',
    'GIT_COMMITTER_EMAIL': 'corpus@flaxlegacy.invalid',
    'GIT_COMMITTER_DATE': '2021-01-01T00:00:00+0000',
}


def git(*argv, cwd=None, env=None, data=None):
  full_env = dict(os.environ)
  full_env.update(env or {})
  proc = subprocess.run(['git'] + list(argv), cwd=cwd, env=full_env,
                        input=data, capture_output=True)
  if proc.returncode:
    raise SystemExit('git %s: %s' % (' '.join(argv),
                                     proc.stderr.decode(errors='replace')))
  return proc.stdout.decode().strip()


def blob_hash(path):
  return git('hash-object', '--no-filters', path)


def check_file(path, want):
  """Problems with the local copy of one listed file (empty if none)."""
  if not os.path.isfile(path):
    return ['missing']
  with open(path, encoding='utf-8', newline='') as f:
    chars = len(f.read())
  problems = []
  if chars != want['chars']:
    problems.append('%d characters, the list says %d' % (chars, want['chars']))
  if want.get('blob') and blob_hash(path) != want['blob']:
    problems.append('blob %s, the list says %s' % (blob_hash(path),
                                                   want['blob']))
  return problems


def build(manifest, files_dir, gitdir, record_blobs):
  """Commits FILES/<commit>/... into GITDIR under refs/rebuilt/<commit>."""
  bad = {}
  for commit, entry in manifest['commits'].items():
    for path, want in entry['files'].items():
      local = os.path.join(files_dir, commit, path)
      problems = check_file(local, dict(want, blob=None) if record_blobs
                            else want)
      if problems:
        bad['%s:%s' % (commit[:8], path)] = problems
  if bad:
    for k, v in sorted(bad.items()):
      print('  %s: %s' % (k, '; '.join(v)), file=sys.stderr)
    raise SystemExit('%d listed files are missing or differ; nothing written'
                     % len(bad))
  if not os.path.isdir(os.path.join(gitdir, 'objects')):
    os.makedirs(gitdir, exist_ok=True)
    git('init', '--bare', '-q', gitdir)
  for commit, entry in manifest['commits'].items():
    work = tempfile.mkdtemp(prefix='snapshot-')
    try:
      git('init', '-q', work)
      for path in entry['files']:
        dst = os.path.join(work, path)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(os.path.join(files_dir, commit, path), dst)
      git('add', '-A', '.', cwd=work)
      msg = ('%s at %s (rebuilt: %s)\n\n%s\n' % (
          manifest['repo'], commit, ', '.join(entry['codebases']),
          '\n'.join(sorted(entry['files']))))
      git('-c', 'commit.gpgsign=false', 'commit', '-q', '-m', msg, cwd=work,
          env=FIXED)
      local = git('rev-parse', 'HEAD', cwd=work)
      git('push', '-q', '--force', gitdir,
          'HEAD:refs/rebuilt/%s' % commit, cwd=work)
      if record_blobs:
        for path, want in entry['files'].items():
          want['blob'] = git('rev-parse', 'HEAD:' + path, cwd=work)
      print('refs/rebuilt/%s -> %s (%d files)' % (commit, local,
                                                  len(entry['files'])))
    finally:
      shutil.rmtree(work)


def check(manifest, gitdir):
  """Compares the mirror's files with the list; returns the mismatches."""
  bad = 0
  for commit, entry in manifest['commits'].items():
    real = run_corpus._git(gitdir, 'cat-file', '-e',
                           commit + '^{commit}').returncode == 0
    rev = commit if real else 'refs/rebuilt/' + commit
    for path, want in sorted(entry['files'].items()):
      got = run_corpus._git(gitdir, 'rev-parse', '%s:%s' % (rev, path))
      got = got.stdout.strip() if got.returncode == 0 else 'missing'
      if got != want['blob']:
        bad += 1
        print('%s %s:%s: %s, the list says %s' % (
            'clone' if real else 'rebuilt', commit[:8], path, got,
            want['blob']))
  print('%s: %d files checked, %d differ' % (
      gitdir, sum(len(e['files']) for e in manifest['commits'].values()), bad))
  return bad


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  p.add_argument('--manifest', default=os.path.join(
      HERE, 'snapshots', 'google-research+google-research.json'))
  p.add_argument('--cache-dir', default=None,
                 help='as run_corpus.py (the mirror goes to '
                 'CACHE/mirrors/<owner>+<name>/repo)')
  p.add_argument('--mirror', default=None,
                 help='the bare repository to write or check (default: '
                 'under the cache dir)')
  p.add_argument('--files', metavar='DIR',
                 help='FILES/<commit>/<path> for every listed file')
  p.add_argument('--record-blobs', action='store_true',
                 help='write the blob hashes of the files given into the '
                 'list (only when making the list)')
  p.add_argument('--check', action='store_true')
  args = p.parse_args(argv)
  with open(args.manifest) as f:
    manifest = json.load(f)
  cache = os.path.abspath(args.cache_dir or run_corpus.default_cache_dir())
  gitdir = args.mirror or os.path.join(cache, 'mirrors', manifest['mirror'],
                                       'repo')
  if args.files:
    build(manifest, args.files, gitdir, args.record_blobs)
    if args.record_blobs:
      with open(args.manifest, 'w') as f:
        json.dump(manifest, f, indent=1)
        f.write('\n')
  if args.check or not args.files:
    sys.exit(1 if check(manifest, gitdir) else 0)


if __name__ == '__main__':
  main()
