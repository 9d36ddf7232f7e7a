"""Numeric verification: the upgraded module against the legacy one.

For one module class: initialise the legacy module (``init`` on the inputs,
under
``nn.stateful`` / ``nn.stochastic``), perturb every parameter (``p + 0.1 *
N(0, 1)``, so zero-initialised heads and scales do not make the comparison
vacuous), run it; then, in a subprocess with ``FLAXLEGACY=off``, initialise
the upgraded linen module (its parameter tree must have the legacy names and
shapes), run it on the same parameters, state and inputs with
``mutable=['batch_stats']``, and compare outputs and updated batch
statistics: ``|upgraded - legacy| <= rtol * (|legacy| + max|legacy|)``,
rtol 1e-5 by default (float32; the max term keeps entries near zero from
failing on float rounding).

Dropout masks come from different streams (legacy ``nn.stochastic``, linen
``rngs={'dropout': ...}``), so outputs that depend on them cannot agree.
The legacy side runs the perturbed module twice, under two stochastic keys;
where the outputs (or batch statistics) differ, the class is stochastic for
these hyper-parameters and is compared in deterministic mode instead: the
legacy switch its ``apply`` signature has (``train``, ``deterministic``,
``is_training``, ``training``; ``DETERMINISTIC_SWITCHES``) set to turn
dropout off on both sides, the result saying so (``detail``: ``compared with
train=False: stochastic in training mode``).  Without such a switch, or still
stochastic with it, the status is ``cannot verify: stochastic``: no
comparison of random draws is reported as a mismatch.

For an upgrade with ``--names linen`` pass its rename map (``upgrade.json``):
the legacy parameters and batch statistics are renamed with
``flaxlegacy.migrate.names.rename_params`` before the upgraded module runs
on them, so the comparison also proves the map.
"""

import json
import os
import subprocess
import sys
import tempfile

# a class whose outputs change with the stochastic key and that has no
# legacy switch to turn that off (module docstring): not a mismatch
STOCHASTIC = 'cannot verify: stochastic'


def _run(args, env_off, cwd, python=None, env=None):
  env = dict(os.environ if env is None else env)
  if env_off:
    env['FLAXLEGACY'] = 'off'
  env.setdefault('JAX_PLATFORMS', 'cpu')
  root = os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))))
  env['PYTHONPATH'] = root + os.pathsep + env.get('PYTHONPATH', '')
  return subprocess.run(
      [python or sys.executable, '-m', 'flaxlegacy.upgrade._verify_worker']
      + args, env=env, cwd=cwd, capture_output=True, text=True, check=False)


def verify_module(legacy_file, upgraded_file, class_name, inputs, hyper=None,
                  fields=None, call=None, var_kw=None, rtol=1e-5, seed=0,
                  perturb=0.1, rename_map=None, root_class=None):
  """Verifies one upgraded module class; returns a result dict.

  Args:
    legacy_file, upgraded_file: the source file before and after the upgrade.
    class_name: the module class (or ``@nn.module`` function) name.
    inputs: ``[(shape, dtype name), ...]`` of the positional inputs; an
      entry None passes None (an optional input such as ``edge_x=None``).
    hyper: the legacy hyper-parameters (what ``.partial`` would bind).
    fields, call, var_kw: the split from upgrade.json's ``modules`` entry.
    rtol: the tolerance (see the module docstring).
    seed: PRNG seed of initialisation and inputs.
    perturb: standard deviation of the noise added to every parameter.
    rename_map: for an upgrade with ``--names linen``: its ``upgrade.json``
      (path, directory, report dict or ``rename_map`` dict).
    root_class: the class's key in the rename map (``'file.py:Class'``);
      by default ``class_name``, which must then be unique in the map.
  Returns:
    ``{'status': 'ok' | 'mismatch' | 'error' | STOCHASTIC, 'detail': ...,
    ...}`` (module docstring: a stochastic class).
  """
  return verify_modules(legacy_file, upgraded_file, [dict(
      class_name=class_name, inputs=inputs, hyper=hyper, fields=fields,
      call=call, var_kw=var_kw, root_class=root_class)], rtol=rtol,
                        seed=seed, perturb=perturb, rename_map=rename_map)[0]


def verify_modules(legacy_file, upgraded_file, checks, rtol=1e-5, seed=0,
                   perturb=0.1, rename_map=None, roots=None, python=None,
                   env=None):
  """Several ``verify_module`` checks, two processes in all.

  ``checks``: dicts with the keyword arguments of ``verify_module``
  (``class_name``, ``inputs``, ``hyper``, ``fields``, ``call``, ``var_kw``),
  and optionally ``outputs``: the indices of the output tuple to compare
  (leave out outputs sampled from a ``make_rng`` stream, which legacy and
  linen draw differently); ``method`` (a legacy ``@nn.module_method``),
  ``method_inputs`` (as ``inputs``) and ``method_kwargs``: also call that
  method on the legacy model (``model.m(...)``) and the upgraded module
  (``apply(..., method='m')``, keywords that became fields left out) and
  compare;
  ``root_class`` (see ``verify_module``); ``legacy_file`` and
  ``upgraded_file``: this check's pair, where it is not the call's (several
  pairs, still two processes; the legacy files must share one folder and
  the upgraded files another, since each process imports its files' sibling
  modules by name; a legacy API the upgraded side imports fails the checks
  of its file and of the files loaded after it).
  ``rename_map``: see ``verify_module``.
  A check may instead name its modules, ``legacy_module`` and
  ``upgraded_module`` (dotted, as the codebase imports them; ``class_name``
  may then be a qualified name): each side imports it with its root first on
  ``sys.path``, ``roots`` = (legacy root, upgraded root), so a codebase's
  package imports work (``legacy_file`` / ``upgraded_file`` unused).
  ``python``: the interpreter of both sides (default: this one); ``env``:
  their environment (default: this one's).
  """
  if rename_map is not None:
    from flaxlegacy.migrate import names  # pylint: disable=g-import-not-at-top
    rename_map = dict(names.load_rename_map(rename_map))
  for key, default in (('legacy_file', legacy_file),
                       ('upgraded_file', upgraded_file)):
    folders = {os.path.dirname(os.path.abspath(c.get(key) or default))
               for c in checks if not c.get('legacy_module')}
    if len(folders) > 1:
      raise ValueError(f'verify_modules: the checks\' {key}s are in several '
                       f'folders {sorted(folders)}; verify each folder\'s '
                       'files in a call of its own')
  spec = {'legacy_file': os.path.abspath(legacy_file or os.curdir),
          'upgraded_file': os.path.abspath(upgraded_file or os.curdir),
          'legacy_root': roots and os.path.abspath(roots[0]),
          'upgraded_root': roots and os.path.abspath(roots[1]),
          'checks': [{
              'legacy_file': os.path.abspath(c.get('legacy_file') or
                                             legacy_file or os.curdir),
              'upgraded_file': os.path.abspath(c.get('upgraded_file') or
                                               upgraded_file or os.curdir),
              'class': c['class_name'], 'hyper': dict(c.get('hyper') or {}),
              'inputs': [None if i is None else [list(i[0]), str(i[1])]
                         for i in c['inputs']],
              'fields': list(c.get('fields') or []),
              'call': list(c.get('call') or []), 'var_kw': c.get('var_kw'),
              'outputs': c.get('outputs'),
              'method': c.get('method'),
              'method_inputs': [None if i is None else [list(i[0]), str(i[1])]
                                for i in c.get('method_inputs') or []],
              'method_kwargs': dict(c.get('method_kwargs') or {}),
              'root_class': c.get('root_class') or c['class_name'],
              'legacy_module': c.get('legacy_module'),
              'upgraded_module': c.get('upgraded_module'),
              'rtol': rtol, 'seed': seed, 'perturb': perturb}
                     for c in checks],
          'rename_map': rename_map}
  with tempfile.TemporaryDirectory() as tmp:
    spec_path = os.path.join(tmp, 'spec.json')
    with open(spec_path, 'w') as f:
      json.dump(spec, f)
    legacy_out = os.path.join(tmp, 'legacy.pkl')
    linen_out = os.path.join(tmp, 'linen.json')
    p = _run(['legacy', spec_path, legacy_out], False, tmp, python, env)
    if p.returncode:
      return [{'status': 'error', 'side': 'legacy',
               'detail': (p.stderr.strip().splitlines() or ['?'])[-1],
               'stderr': p.stderr[-4000:]}] * len(checks)
    p = _run(['linen', spec_path, linen_out, legacy_out], True, tmp, python,
             env)
    if p.returncode:
      return [{'status': 'error', 'side': 'upgraded',
               'detail': (p.stderr.strip().splitlines() or ['?'])[-1],
               'stderr': p.stderr[-4000:]}] * len(checks)
    with open(linen_out) as f:
      results = json.load(f)
  for result in results:
    if 'error' in result:
      result['status'] = 'error'
      result['detail'] = result['error']
      continue
    if 'stochastic' in result:
      result['status'] = STOCHASTIC
      result['detail'] = result['stochastic']
      continue
    ok = result['match'] and result['tree'] and not result['legacy_imported']
    result['status'] = 'ok' if ok else 'mismatch'
    if not ok:
      result['detail'] = ('parameter tree differs' if not result['tree'] else
                          'legacy API imported by upgraded code'
                          if result['legacy_imported'] else
                          f"outputs differ (max rel err "
                          f"{result['max_rel_err']:.3g})")
    if result.get('switch_note'):
      result['detail'] = '; '.join(
          d for d in (result.get('detail'), result['switch_note']) if d)
  return results


def verify_codebase(files, codebase, upgraded_root, rename_map=None):
  """``--verify``: every class with literal ``init_by_shape`` shapes.

  ``rename_map``: the report's (``--names linen``), else None.
  """
  results = []
  if upgraded_root is None:
    return results
  by_rel = {sf.rel: sf for sf in files}
  for rel, facts in codebase.files.items():
    for shapes in facts.init_shapes:
      info = codebase.module(facts, shapes['class'])
      if info is None or info.file not in by_rel:
        continue
      res = verify_module(
          by_rel[info.file].path, os.path.join(upgraded_root, info.file),
          info.name, shapes['inputs'], shapes['kwargs'], info.fields,
          info.call, info.var_kw, rename_map=rename_map,
          root_class=f'{info.file}:{info.name}' if rename_map else None)
      res.update({'file': info.file, 'class': info.name,
                  'inputs': shapes['inputs'], 'hyper': shapes['kwargs']})
      res.pop('stderr', None)
      results.append(res)
  return results


# --- at the shapes the codebase's own runs use -----------------------------

STATUSES = ('verified', 'verified inside', 'mismatch', 'error', STOCHASTIC,
            'not rebuildable', 'not initialised')


def _dotted(rel):
  return rel[:-3].replace(os.sep, '.').replace('/', '.') if (
      rel.endswith('.py')) else None


def verify_recorded(modules, recorded, inside, legacy_root, upgraded_root,
                    python=None, env=None, dotted=None, import_roots=None):
  """Every class of ``modules`` (upgrade.json's) checked at the
  initialisations the codebase's runs recorded (observe.py
  ``record_inits`` / ``read_inits``: ``recorded`` {(abs file, qualname):
  [records]}, ``inside`` {(file, qualname): {top-level (file, qualname)}}).

  ``legacy_root`` / ``upgraded_root``: the trees (upgrade.json's paths are
  relative to them), each first on ``sys.path`` of its side unless
  ``import_roots`` names the folders to put there instead; ``dotted(rel)``:
  the module name a file is imported by (default: its path under the
  root).  Returns one entry per
  class, ``status`` one of ``STATUSES`` (module docstring of
  benchmarks/corpus/README.md: verified, verified inside a class that
  verified, mismatch, error, cannot verify: stochastic, not rebuildable,
  not initialised).  A class is verified when every check is ok (``detail``
  then names the switch a stochastic class was compared with); else it
  takes the first mismatch or error, and only where every failing check is
  stochastic, ``STOCHASTIC``.
  """
  dotted = dotted or _dotted
  by_class = {}
  for (path, qual), recs in recorded.items():
    rel = os.path.relpath(path, legacy_root)
    if rel.startswith('..'):
      continue
    by_class.setdefault((rel, qual.split('.')[-1]), []).append((qual, recs))
  entries, checks = [], []
  for m in modules:
    entry = {'file': m['file'], 'class': m['class']}
    entries.append(entry)
    found = by_class.get((m['file'], m['class']), [])
    usable = [(q, r) for q, rs in found for r in rs
              if 'inputs' in r and '<locals>' not in q]
    if not found:
      entry['status'] = 'not initialised'
      continue
    if not usable:
      entry['status'] = 'not rebuildable'
      entry['detail'] = '; '.join(sorted({
          r.get('why', 'defined inside a function')
          for _, rs in found for r in rs}))
      continue
    entry['checks'] = []
    for qual, r in usable:
      name = r['module'] if r['module'] != '__main__' else dotted(m['file'])
      entry['checks'].append(len(checks))
      checks.append(dict(
          class_name=qual, inputs=r['inputs'], hyper=r['hyper'],
          fields=m['fields'], call=m['call'], var_kw=m['var_kw'],
          legacy_module=name, upgraded_module=name))
  results = verify_modules(None, None, checks, roots=import_roots or (
      legacy_root, upgraded_root), python=python, env=env) if checks else []
  for entry in entries:
    if 'checks' not in entry:
      continue
    got = [results[i] for i in entry.pop('checks')]
    # a mismatch or an error before a check that could not compare
    bad = sorted((r for r in got if r.get('status') != 'ok'),
                 key=lambda r: r.get('status') == STOCHASTIC)
    entry['checked'] = len(got)
    if not bad:
      entry['status'] = 'verified'
      entry['max_rel_err'] = max(r.get('max_rel_err', 0.0) for r in got)
      notes = sorted({r['switch_note'] for r in got if r.get('switch_note')})
      if notes:  # compared in deterministic mode
        entry['detail'] = '; '.join(notes)
    else:
      entry['status'] = bad[0].get('status', 'error')
      entry['detail'] = str(bad[0].get('detail'))[:300]
  # never initialised at top level, applied inside a class that verified:
  # its parameters and computation are part of that check
  verified = {(e['file'], e['class']) for e in entries
              if e['status'] == 'verified'}
  for e in entries:
    if e['status'] != 'not initialised':
      continue
    for (path, qual), tops in inside.items():
      if (os.path.relpath(path, legacy_root), qual.split('.')[-1]) != (
          e['file'], e['class']):
        continue
      parents = sorted({(os.path.relpath(p, legacy_root), q.split('.')[-1])
                        for p, q in tops} & verified)
      if parents:
        e['status'] = 'verified inside'
        e['detail'] = ', '.join('%s:%s' % p for p in parents[:3])
        break
  return entries


def record_and_verify(cmd, src_root, upgraded_root, modules, cwd=None,
                      stderr=None):
  """``--verify-with CMD``: CMD (the codebase's tests) runs under the layer
  with ``FLAXLEGACY_RECORD_INITS``, SRC first on ``PYTHONPATH``; then
  ``verify_recorded``."""
  from flaxlegacy.upgrade import observe  # pylint: disable=g-import-not-at-top
  stderr = stderr or sys.stderr
  with tempfile.TemporaryDirectory() as tmp:
    env = {k: v for k, v in os.environ.items() if k != 'FLAXLEGACY'}
    env[observe.INITS_ENV] = tmp
    env['PYTHONPATH'] = os.pathsep.join(
        [os.path.abspath(src_root)] + [p for p in env.get(
            'PYTHONPATH', '').split(os.pathsep) if p])
    p = subprocess.run(cmd, shell=True, cwd=cwd or src_root, env=env,
                       check=False)
    if p.returncode:
      stderr.write(f'flaxlegacy upgrade --verify-with: {cmd!r} exited with '
                   f'{p.returncode}; verifying what it initialised\n')
    inside = {}
    recorded = observe.read_inits(tmp, inside)
  return verify_recorded(modules, recorded, inside,
                         os.path.abspath(src_root),
                         os.path.abspath(upgraded_root))
