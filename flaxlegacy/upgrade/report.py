"""``upgrade.json`` and the printed summary."""

import json

# upgrade.json's ``shipped_modules``: the flaxlegacy helpers (plain linen /
# optax / NumPy, flaxlegacy.migrate) whose code the upgraded tree carries,
# by their flaxlegacy name; ``shipped``: the helper copies written into the
# tree (shipping.py), each with its path, import and names.


def build(files, codebase, shipped=()):
  per_file = {}
  modules = []
  for sf in files:
    per_file[sf.rel] = sf.report.as_dict()
    for m in sf.report.modules:
      modules.append(m)
  todos = sum(len(sf.report.left) for sf in files)
  out = {
      'version': 1,
      'files': per_file,
      'modules': modules,
      'shipped_modules': sorted({
          r['shipped'] for sf in files for r in sf.report.rewritten
          if r.get('shipped')} | {
              n for s in shipped for n in s.as_dict()['names'].values()}),
      'shipped': [s.as_dict() for s in shipped],
      'init_shapes': [dict(s, file=path) for path, f in codebase.files.items()
                      for s in f.init_shapes],
      'summary': {
          'files': len(files),
          'files_changed': sum(1 for sf in files if sf.new_code is not None
                               and sf.new_code != sf.code),
          'syntax_errors': [sf.error for sf in files if sf.error],
          'failed': [sf.report.failed for sf in files
                     if getattr(sf.report, 'failed', None)],
          'modules_rewritten': len(modules),
          'rewrites': sum(len(sf.report.rewritten) for sf in files),
          'todos': todos,
      },
  }
  stale = getattr(codebase, 'stale_dependencies', None)
  if stale:
    # installed dependencies calling removed JAX names (dependencies.py)
    out['stale_dependencies'] = {
        top: {'distribution': name, 'version': version,
              'uses': [{'name': q, 'file': path, 'line': line}
                       for q, path, line in uses]}
        for top, (name, version, uses) in sorted(stale.items())}
  if codebase.names_mode == 'linen':
    # --names linen: per upgraded class ('file:Class'), its direct children
    # legacy name -> linen name (rules/linen_names.py)
    out['names'] = 'linen'
    out['rename_map'] = {f"{e['file']}:{e['class']}": e for sf in files
                         for e in sf.report.renames}
  return out


def write(report, path):
  with open(path, 'w', encoding='utf-8') as fh:
    json.dump(report, fh, indent=1, sort_keys=True)
    fh.write('\n')


def summary_text(report):
  s = report['summary']
  lines = [f"flaxlegacy upgrade: {s['files']} Python files, "
           f"{s['files_changed']} changed, {s['modules_rewritten']} module "
           f"classes rewritten, {s['rewrites']} rewrites, {s['todos']} TODOs"]
  for e in s['syntax_errors']:
    lines.append(f'  skipped (syntax error): {e}')
  for e in s.get('failed', ()):
    lines.append(f'  not upgraded: {e}')
  for c in report.get('shipped', ()):
    lines.append(f"  helpers copied into {c['path']} (import {c['import']}): "
                 f"{', '.join(sorted(c['names']))}")
  for path, f in sorted(report['files'].items()):
    for item in f['left']:
      lines.append(f"  TODO {path}:{item['line']}: {item['why']}")
  for key, e in sorted(report.get('rename_map', {}).items()):
    if e.get('legacy_names'):
      lines.append(f"  legacy names kept in {key}: {e['legacy_names']}")
    for k in e.get('kept', ()):
      lines.append(f"  legacy name kept in {key}: {k['name']} ({k['why']})")
  for v in report.get('verification', []):
    lines.append(f"  verify {v['file']}:{v['class']}: {v['status']}"
                 + (f" ({v['detail']})" if v.get('detail') else ''))
  recorded = report.get('verification_recorded')
  if recorded is not None:
    counts = {}
    for e in recorded:
      counts[e['status']] = counts.get(e['status'], 0) + 1
    lines.append('  verified at the shapes the command initialised: ' + (
        ', '.join(f'{n} {s}' for s, n in counts.items()) or 'no classes'))
    for e in recorded:
      # and those verified in deterministic mode (the detail says how)
      if e['status'] not in ('verified', 'verified inside') or (
          e['status'] == 'verified' and e.get('detail')):
        lines.append(f"  verify {e['file']}:{e['class']}: {e['status']}"
                     + (f" ({e['detail']})" if e.get('detail') else ''))
  return '\n'.join(lines) + '\n'
