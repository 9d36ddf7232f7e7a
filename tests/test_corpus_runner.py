"""The corpus runner's plumbing (benchmarks/corpus): where it looks for
things, and the snapshot rebuild. The corpus itself is not run here."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, 'benchmarks', 'corpus')


def _load(name):
  spec = importlib.util.spec_from_file_location(
      name, os.path.join(CORPUS, name + '.py'))
  module = importlib.util.module_from_spec(spec)
  sys.path.insert(0, CORPUS)
  try:
    spec.loader.exec_module(module)
  finally:
    sys.path.remove(CORPUS)
  return module


run_corpus = _load('run_corpus')
rebuild_snapshot = _load('rebuild_snapshot')


def test_cache_dir_rule(monkeypatch, tmp_path):
  monkeypatch.setenv('FLAXLEGACY_CORPUS_CACHE', str(tmp_path / 'a'))
  monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path / 'xdg'))
  assert run_corpus.default_cache_dir() == str(tmp_path / 'a')
  monkeypatch.delenv('FLAXLEGACY_CORPUS_CACHE')
  assert run_corpus.default_cache_dir() == str(
      tmp_path / 'xdg' / 'flaxlegacy-corpus')
  monkeypatch.delenv('XDG_CACHE_HOME')
  monkeypatch.setenv('HOME', str(tmp_path / 'home'))
  assert run_corpus.default_cache_dir() == str(
      tmp_path / 'home' / '.cache' / 'flaxlegacy-corpus')


def test_every_default_is_under_the_cache_dir_or_this_checkout(
    monkeypatch, tmp_path):
  monkeypatch.setenv('FLAXLEGACY_CORPUS_CACHE', str(tmp_path / 'cache'))
  args = run_corpus.parse_args([])
  cache = str(tmp_path / 'cache')
  paths = ([args.flaxlegacy_python, args.upgraded_python, args.workdir] +
           args.mirror_root +
           [kv.split('=', 1)[1] for kv in args.oracle_python])
  assert all(p.startswith(cache + os.sep) for p in paths), paths
  assert args.flaxlegacy_path == ROOT
  assert not args.upgraded_path   # nothing of flaxlegacy on the upgraded side
  assert sorted(kv.split('=')[0] for kv in args.oracle_python) == [
      '0.3.5', '0.3.6']


def test_corpus_json_names_no_machine_path():
  with open(os.path.join(CORPUS, 'corpus.json')) as f:
    text = f.read()
  assert '/work/' not in text and '/tmp/' not in text
  corpus = run_corpus.load_corpus(os.path.join(CORPUS, 'corpus.json'))
  for cb in corpus['codebases']:
    assert cb['oracle'] in ('0.3.5', '0.3.6'), cb['name']
    assert len(cb['commit']) == 40, cb['name']


def _git(*argv, cwd=None):
  return subprocess.run(['git'] + list(argv), cwd=cwd, check=True,
                        capture_output=True, text=True).stdout.strip()


def _snapshot(tmp_path):
  """A two-file manifest for a made-up upstream commit, and the files."""
  commit = 'ab' * 20
  files = {'pkg/mod.py': 'X = 1\n', 'pkg/mod_test.py': 'from pkg import mod\n'}
  src = tmp_path / 'files' / commit
  for path, text in files.items():
    (src / path).parent.mkdir(parents=True, exist_ok=True)
    (src / path).write_text(text)
  manifest = {
      'repo': 'someone/mono', 'mirror': 'someone+mono',
      'commits': {commit: {'codebases': ['pkg'], 'files': {
          path: {'chars': len(text),
                 'blob': _git('hash-object', str(src / path))}
          for path, text in files.items()}}}}
  mpath = tmp_path / 'manifest.json'
  mpath.write_text(json.dumps(manifest))
  return commit, files, manifest, mpath


def test_rebuild_then_extract_at_the_upstream_commit(tmp_path):
  commit, files, manifest, mpath = _snapshot(tmp_path)
  gitdir = tmp_path / 'mirrors' / 'someone+mono' / 'repo'
  rebuild_snapshot.main(['--manifest', str(mpath), '--mirror', str(gitdir),
                         '--files', str(tmp_path / 'files')])
  assert rebuild_snapshot.check(manifest, str(gitdir)) == 0
  # The same files give the same local commit (fixed author and date).
  first = _git('--git-dir', str(gitdir), 'rev-parse', 'refs/rebuilt/' + commit)
  rebuild_snapshot.main(['--manifest', str(mpath), '--mirror', str(gitdir),
                         '--files', str(tmp_path / 'files')])
  assert _git('--git-dir', str(gitdir), 'rev-parse',
              'refs/rebuilt/' + commit) == first

  cb = {'name': 'pkg', 'repo': 'someone/mono', 'mirror': 'someone+mono',
        'commit': commit, 'rebuilt': True, 'paths': ['pkg']}
  args = run_corpus.parse_args(['--cache-dir', str(tmp_path)])
  src = run_corpus.extract(cb, None, args)
  for path, text in files.items():
    assert (tmp_path / 'work' / 'pkg' / 'src' / path).read_text() == text
  assert cb['_snapshot']['rebuilt'] is True
  assert cb['_snapshot']['rev'] == 'refs/rebuilt/' + commit
  assert src == str(tmp_path / 'work' / 'pkg' / 'src')


def test_rebuild_refuses_a_file_that_differs_from_the_list(tmp_path):
  commit, _, _, mpath = _snapshot(tmp_path)
  (tmp_path / 'files' / commit / 'pkg' / 'mod.py').write_text('X = 2\n')
  gitdir = tmp_path / 'repo'
  with pytest.raises(SystemExit, match='missing or differ'):
    rebuild_snapshot.main(['--manifest', str(mpath), '--mirror', str(gitdir),
                           '--files', str(tmp_path / 'files')])
  assert not gitdir.exists()


def test_a_missing_mirror_says_how_to_make_one(tmp_path):
  cb = {'name': 'x', 'repo': 'someone/x', 'mirror': 'someone+x',
        'commit': 'cd' * 20, 'paths': ['.']}
  args = run_corpus.parse_args(['--cache-dir', str(tmp_path)])
  with pytest.raises(SystemExit, match='git clone --bare https://github.com/someone/x'):
    run_corpus.extract(cb, None, args)


def test_observe_command_runs_each_test_file_as_the_flaxlegacy_side(
    tmp_path):
  # the command `flaxlegacy upgrade --observe` gets: every selected test
  # file but the skipped ones, with the codebase's env, its PYTHONPATH
  # entries after whatever PYTHONPATH the upgrade hands it (the hook's)
  src = tmp_path / 'src'
  (src / 'tests').mkdir(parents=True)
  record = tmp_path / 'seen.txt'
  for name in ('a_test.py', 'b_test.py', 'c_test.py'):
    (src / 'tests' / name).write_text(
        'import os\n'
        'def test_env():\n'
        f'  with open({str(record)!r}, "a") as f:\n'
        f'    f.write("{name} " + os.environ["PYTHONPATH"] + " "\n'
        '            + os.environ["TOY"] + "\\n")\n')
  cb = {'name': 'toy', 'tests': ['tests/*_test.py'], 'env': {'TOY': 'x y'},
        'skip_files': {'tests/b_test.py': 'needs a GPU'}}
  args = run_corpus.parse_args([
      '--cache-dir', str(tmp_path / 'cache'), '--flaxlegacy-python',
      sys.executable, '--files', 'tests/[ab]_test.py', '--observe'])
  cmd = run_corpus.observe_command(cb, str(src), args)
  env = dict(os.environ, PYTHONPATH=str(tmp_path / 'hook'))
  env.pop('PYTEST_ADDOPTS', None)
  proc = subprocess.run(cmd, shell=True, env=env, capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
  lines = record.read_text().splitlines()
  assert len(lines) == 1, lines   # c: not selected; b: skipped
  name, pythonpath, toy = lines[0].split(' ', 2)
  assert name == 'a_test.py' and toy == 'x y'
  assert pythonpath.split(os.pathsep)[:2] == [str(tmp_path / 'hook'),
                                              os.path.join(str(src), '.')], (
      pythonpath)
