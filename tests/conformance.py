"""Runs the legacy conformance generators under flaxlegacy and compares.

The generators (legacy API programs) and the reference traces recorded from
real legacy Flax live in ``shared/`` beside the checkout (``../shared``), or
where ``FLAXLEGACY_SHARED`` points.  Each program is generated at most once
per test session, in a subprocess of this interpreter, and compared array by
array with ``compare_traces.compare_arrays`` (rtol 1e-4 / atol 1e-6 unless a
case says otherwise; ../shared/conformance/README.md explains why).
"""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def shared_dir():
  """The shared/ folder, or None where it is absent."""
  path = os.environ.get('FLAXLEGACY_SHARED') or os.path.join(
      os.path.dirname(REPO), 'shared')
  if os.path.isdir(os.path.join(path, 'conformance')):
    return os.path.abspath(path)
  return None


def reference_dir():
  return os.path.join(shared_dir(), 'reference', 'legacy')


def conformance_dir():
  return os.path.join(shared_dir(), 'conformance')


def _compare_module():
  path = os.path.join(conformance_dir(), 'compare_traces.py')
  spec = importlib.util.spec_from_file_location('_compare_traces', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def manifest():
  with open(os.path.join(reference_dir(), 'manifest.json')) as f:
    return json.load(f)


def generate(program, out_dir, timeout=900):
  """Runs gen_<program>.py under this interpreter; returns the completed run."""
  env = dict(os.environ)
  env.setdefault('JAX_PLATFORMS', 'cpu')
  env['PYTHONPATH'] = REPO + os.pathsep + env.get('PYTHONPATH', '')
  # Works also where the start-up .pth is not installed (source checkout).
  env['LEGACY_TRACE_PRELOAD'] = 'flaxlegacy.nn,flaxlegacy.optim'
  script = os.path.join(conformance_dir(), f'gen_{program}.py')
  return subprocess.run(
      [sys.executable, script, '--out', out_dir], env=env,
      cwd=conformance_dir(), capture_output=True, text=True, timeout=timeout)


def compare(program, cand_dir, prefixes=None, rtol=1e-4, atol=1e-6):
  """Compares the candidate arrays of ``program`` whose key starts with one of
  ``prefixes`` (all when None).  Returns (number compared, failures)."""
  cmp = _compare_module()
  ref_root = reference_dir()
  entries = [a for a in manifest()['arrays'] if a['program'] == program]
  if prefixes is not None:
    entries = [a for a in entries
               if any(a['key'] == p or a['key'].startswith(p + '/')
                      for p in prefixes)]
  failures = []
  ref_cache, cand_cache = {}, {}
  for e in entries:
    if e['file'] not in ref_cache:
      ref_cache[e['file']] = np.load(os.path.join(ref_root, e['file']))
      path = os.path.join(cand_dir, e['file'])
      cand_cache[e['file']] = np.load(path) if os.path.exists(path) else None
    ref = ref_cache[e['file']][e['key']]
    cand = cand_cache[e['file']]
    if cand is None or e['key'] not in cand.files:
      failures.append((e['key'], 'missing in candidate'))
      continue
    ok, detail = cmp.compare_arrays(ref, cand[e['key']], rtol, atol)
    if not ok:
      failures.append((e['key'], detail))
  return len(entries), failures


def compare_files(program, cand_dir, rtol=1e-4, atol=1e-6):
  """Compares the raw checkpoint files of ``program`` leaf by leaf."""
  cmp = _compare_module()
  failures, count = [], 0
  for x in manifest()['files']:
    if x['program'] != program:
      continue
    count += 1
    ref = cmp.flatten(cmp.load_ckpt(os.path.join(reference_dir(), x['path'])))
    cpath = os.path.join(cand_dir, x['path'])
    if not os.path.exists(cpath):
      failures.append((x['path'], 'missing in candidate'))
      continue
    cand = cmp.flatten(cmp.load_ckpt(cpath))
    for k in sorted(set(ref) | set(cand)):
      if k not in ref or k not in cand:
        failures.append((x['path'] + ':' + k, 'only in one of the files'))
        continue
      ok, detail = cmp.compare_arrays(np.asarray(ref[k]), np.asarray(cand[k]),
                                      rtol, atol)
      if not ok:
        failures.append((x['path'] + ':' + k, detail))
  return count, failures
