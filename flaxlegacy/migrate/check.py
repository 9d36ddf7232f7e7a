"""``flaxlegacy check PATH``: which legacy Flax / removed JAX names a codebase uses.

In the spirit of ``tf_upgrade_v2``'s report.  The scanned code is parsed with
``ast`` and never executed.  Every use of a legacy name is reported with
``file:line``, whether flaxlegacy supports it, the legacy versions that had it
and what to write today with linen / optax / modern JAX.  The exit status is
1 when something unsupported is found (2 for bad arguments), else 0.

The scanner reads the same table as the import hook (``flaxlegacy._names``):
a legacy module path is supported iff the hook serves it, a legacy name iff
the module the hook serves has it.  So this report cannot drift from what
actually imports.
"""

import ast
import collections
import dataclasses
import importlib
import json
import os
import re
import sys

from flaxlegacy import _names

SUPPORTED = 'supported'
UNSUPPORTED = 'unsupported'

_REMOVED_SINCE = re.compile(r'^[A-Za-z_.]+<')
# Top-level packages whose imports and attribute chains the scanner follows.
_SCANNED_ROOTS = ('flax', 'jax', 'numpy', 'collections', 'inspect')


@dataclasses.dataclass(frozen=True)
class Finding:
  path: str
  line: int
  col: int
  name: str        # qualified legacy name, e.g. 'flax.nn.Dense'
  status: str      # SUPPORTED or UNSUPPORTED
  versions: str    # e.g. 'v0.1.0rc2-v0.3.6' or 'removed in jax 0.3.16'
  modern: str      # what to write today ('' when nothing to say)
  note: str = ''

  def format(self):
    text = f'{self.path}:{self.line}:{self.col}: {self.name}: {self.status}'
    if self.versions:
      text += f' ({self.versions})'
    if self.modern:
      text += f'; today: {self.modern}'
    if self.note:
      text += f'; {self.note}'
    return text


# --- resolution of a qualified name against the table ---------------------


def _module_prefix(qualified):
  """Longest prefix of ``qualified`` that is a legacy module path."""
  parts = qualified.split('.')
  for i in range(len(parts), 0, -1):
    head = '.'.join(parts[:i])
    if head in _names.MODULES_BY_LEGACY:
      return head, parts[i:]
  return None, parts


_target_cache = {}


def _target_module(entry):
  """The module the import hook serves for ``entry`` (None if it fails)."""
  if entry.legacy not in _target_cache:
    try:
      if entry.target:
        _target_cache[entry.legacy] = importlib.import_module(entry.target)
      else:
        _target_cache[entry.legacy] = importlib.import_module(entry.legacy)
    except Exception:  # pylint: disable=broad-except
      _target_cache[entry.legacy] = None
  return _target_cache[entry.legacy]


def _versions(since, until):
  if since == 'flaxlegacy':
    return 'flaxlegacy extension'
  if _REMOVED_SINCE.match(since):  # 'jax<0.3.16', 'numpy<2.0', ...
    return f'removed in {until}' if not until.startswith('renamed') else until
  return f'{since}-{until}' if since != until else since


def _symbol_prefix(qualified):
  """Longest prefix of ``qualified`` that the table lists as a symbol."""
  parts = qualified.split('.')
  for i in range(len(parts), 1, -1):
    head = '.'.join(parts[:i])
    if head in _names.SYMBOLS:
      return _names.SYMBOLS[head]
  return None


def _provided(qualified):
  """Whether the module the hook serves has the attribute path."""
  module_path, rest = _module_prefix(qualified)
  if module_path is None:
    return False
  obj = _target_module(_names.MODULES_BY_LEGACY[module_path])
  for attr in rest:
    if obj is None or not hasattr(obj, attr):
      return False
    obj = getattr(obj, attr)
  return obj is not None


def _legacy_flax_finding(qualified):
  """(name, status, versions, modern, note) for a name under flax.nn/optim."""
  symbol = _symbol_prefix(qualified)
  if symbol is not None:
    # A listed name (``nn.stochastic`` the function, not the submodule).
    status = SUPPORTED if _provided(symbol.name) else UNSUPPORTED
    note = '' if status == SUPPORTED else 'not provided by flaxlegacy'
    return (symbol.name, status, _versions(symbol.since, symbol.until),
            symbol.modern or '', note)
  module_path, rest = _module_prefix(qualified)
  if module_path is None:
    root = _names.legacy_root(qualified)
    return (qualified, UNSUPPORTED, '', '',
            f'no legacy module {qualified!r} under {root}')
  entry = _names.MODULES_BY_LEGACY[module_path]
  if not rest:
    ok = _target_module(entry) is not None
    return (module_path, SUPPORTED if ok else UNSUPPORTED,
            _versions(entry.since, entry.until), entry.modern or '',
            '' if ok else 'module not provided by flaxlegacy')
  name = module_path + '.' + rest[0]
  root_entry = _names.MODULES_BY_LEGACY[_names.legacy_root(module_path)]
  versions = _versions(root_entry.since, root_entry.until)
  if not _provided(name):
    return (name, UNSUPPORTED, versions, entry.modern or '',
            f'flaxlegacy does not provide {rest[0]!r} in {module_path}')
  return name, SUPPORTED, versions, entry.modern or '', ''


def _jax_finding(qualified, from_import):
  """(name, status, versions, modern, note) for a removed/renamed JAX name
  (or NumPy / Python / flax.jax_utils name of ``_names.ALIASES``)."""
  if qualified in _names.CHANGED_MEANING:
    return (qualified, SUPPORTED, '', '', _names.CHANGED_MEANING[qualified])
  for bad, why in _names.UNSUPPORTED.items():
    if qualified == bad or qualified.startswith(bad + '.'):
      return bad, UNSUPPORTED, '', '', why
  parts = qualified.split('.')
  for i in range(len(parts), 1, -1):
    head = '.'.join(parts[:i])
    symbol = _names.SYMBOLS.get(head)
    if symbol is not None:
      missing = _missing_from_served_module(head, parts[i:i + 1])
      if missing:
        return (missing, UNSUPPORTED, _versions(symbol.since, symbol.until),
                symbol.modern, f'{head} is served, but not {missing}')
      note = ('still in JAX, deprecated' if symbol.until.startswith('renamed')
              else 'alias added by flaxlegacy')
      return (head, SUPPORTED, _versions(symbol.since, symbol.until),
              symbol.modern, note)
  module_path, _ = _module_prefix(qualified)
  # `jax.config` is today's Config object: only the *module* import is legacy.
  if module_path is not None and (from_import or module_path != 'jax.config'):
    entry = _names.MODULES_BY_LEGACY[module_path]
    return (module_path, SUPPORTED, _versions(entry.since, entry.until),
            entry.modern or '', 'module path served by flaxlegacy')
  return None


def _missing_from_served_module(head, rest):
  """'jax.lib.xla_client.ops' when the module served as ``head`` (an alias
  whose value is a module) has no ``rest[0]``, else None."""
  if not rest:
    return None
  alias = next((a for a in _names.ALIASES
                if f'{a.owner}.{a.name}' == head), None)
  if alias is None or not alias.value.endswith(':'):
    return None
  try:
    module = importlib.import_module(alias.value[:-1])
  except Exception:  # pylint: disable=broad-except
    return None
  return None if hasattr(module, rest[0]) else f'{head}.{rest[0]}'


def resolve(qualified, from_import=False):
  """Classifies one qualified name; None when it is not a legacy name."""
  if _names.legacy_root(qualified):
    return _legacy_flax_finding(qualified)
  if qualified == 'flax.deprecated':
    return _legacy_flax_finding(qualified)
  if qualified.startswith('jax.') or qualified == 'jax':
    return _jax_finding(qualified, from_import)
  if _names.alias_root(qualified):
    return _jax_finding(qualified, from_import)
  return None


# --- the AST walk ----------------------------------------------------------


def dotted_name(node):
  """'a.b.c' for a Name/Attribute chain, else None."""
  parts = []
  while isinstance(node, ast.Attribute):
    parts.append(node.attr)
    node = node.value
  if isinstance(node, ast.Name):
    parts.append(node.id)
    return '.'.join(reversed(parts))
  return None


class _Scanner(ast.NodeVisitor):
  """Collects (line, col, qualified name, from_import) of legacy-looking uses."""

  def __init__(self):
    self.bindings = {}   # local name -> qualified module/object path
    self.uses = []
    self.behaviours = []  # (line, col, name, _names.BEHAVIOURS name)

  def _add(self, node, qualified, from_import=False):
    self.uses.append((node.lineno, node.col_offset + 1, qualified,
                      from_import))

  def visit_Import(self, node):  # pylint: disable=invalid-name
    for alias in node.names:
      if alias.asname:
        self.bindings[alias.asname] = alias.name
      else:
        top = alias.name.split('.')[0]
        self.bindings[top] = top
      if alias.name.split('.')[0] in ('flax', 'jax'):
        self._add(node, alias.name, from_import=True)

  def visit_ImportFrom(self, node):  # pylint: disable=invalid-name
    if node.level or not node.module:
      return
    base = node.module
    if base.split('.')[0] not in _SCANNED_ROOTS:
      for alias in node.names:
        self.bindings.pop(alias.asname or alias.name, None)
      return
    self._add(node, base, from_import=True)
    for alias in node.names:
      if alias.name == '*':
        continue
      qualified = base + '.' + alias.name
      self.bindings[alias.asname or alias.name] = qualified
      self._add(node, qualified, from_import=True)

  def visit_Attribute(self, node):  # pylint: disable=invalid-name
    dotted = dotted_name(node)
    if dotted is not None:
      root, _, rest = dotted.partition('.')
      if root in self.bindings and (
          self.bindings[root].split('.')[0] in _SCANNED_ROOTS):
        self._add(node, self.bindings[root] + '.' + rest)
      return  # the whole chain is handled; do not visit its inner parts
    self.generic_visit(node)

  def visit_Call(self, node):  # pylint: disable=invalid-name
    func = dotted_name(node.func)
    qualified = None
    if func is not None:
      root, _, rest = func.partition('.')
      if root in self.bindings:
        qualified = self.bindings[root] + ('.' + rest if rest else '')
    keywords = {k.arg for k in node.keywords if k.arg}
    if (qualified == 'jax.numpy.clip' or (
        isinstance(node.func, ast.Attribute) and node.func.attr == 'clip' and
        qualified is None)) and keywords & {'a', 'a_min', 'a_max'}:
      name = 'jax.numpy.clip' if qualified else 'Array.clip'
      old = sorted(keywords & {'a', 'a_min', 'a_max'})
      self.behaviours.append((node.lineno, node.col_offset + 1,
                              f'{name}({", ".join(k + "=" for k in old)})',
                              'arguments'))
    if (qualified == 'jax.lax.dynamic_slice' and len(node.args) >= 3 and
        isinstance(node.args[2], ast.Call) and
        self._resolves_to(node.args[2].func,
                          ('jax.numpy.array', 'jax.numpy.asarray'))):
      self.behaviours.append((node.lineno, node.col_offset + 1,
                              'jax.lax.dynamic_slice(slice_sizes=jnp.array)',
                              'arguments'))
    self.generic_visit(node)

  def _resolves_to(self, node, names):
    dotted = dotted_name(node)
    if dotted is None:
      return False
    root, _, rest = dotted.partition('.')
    return root in self.bindings and (
        self.bindings[root] + ('.' + rest if rest else '')) in names

  def visit_Name(self, node):  # pylint: disable=invalid-name
    if isinstance(node.ctx, ast.Load) and node.id in self.bindings:
      qualified = self.bindings[node.id]
      if qualified.split('.')[0] in _SCANNED_ROOTS and '.' in qualified:
        self._add(node, qualified)


def scan_source(source, path='<string>'):
  """Findings for one file's source text."""
  tree = ast.parse(source, filename=path)
  scanner = _Scanner()
  scanner.visit(tree)
  findings = []
  seen = set()
  for line, col, qualified, from_import in sorted(scanner.uses):
    result = resolve(qualified, from_import)
    if result is None:
      continue
    name, status, versions, modern, note = result
    key = (line, name)
    if key in seen:
      continue
    seen.add(key)
    findings.append(Finding(path, line, col, name, status, versions, modern,
                            note))
  behaviours = {b.name: b for b in _names.BEHAVIOURS}
  for line, col, name, behaviour in scanner.behaviours:
    b = behaviours[behaviour]
    findings.append(Finding(
        path, line, col, name, SUPPORTED, f'changed in {b.changed}',
        _BEHAVIOUR_MODERN.get(name.split('(')[0], ''),
        f'legacy behaviour restored in legacy mode ({b.env}=modern turns '
        'it off)'))
  from flaxlegacy.migrate import check_linen  # pylint: disable=g-import-not-at-top
  findings.extend(check_linen.findings(tree, scanner.bindings, path, Finding,
                                       SUPPORTED, UNSUPPORTED))
  findings.sort(key=lambda f: (f.line, f.col))
  return findings


_BEHAVIOUR_MODERN = {
    'jax.numpy.clip': 'jnp.clip(x, min=..., max=...)',
    'Array.clip': 'x.clip(min=..., max=...)',
    'jax.lax.dynamic_slice': 'slice sizes as a tuple of Python ints',
}


def iter_python_files(path):
  if os.path.isfile(path):
    yield path
    return
  for root, dirs, files in os.walk(path):
    dirs[:] = sorted(d for d in dirs if not d.startswith('.') and
                     d not in ('__pycache__', 'node_modules'))
    for name in sorted(files):
      if name.endswith('.py'):
        yield os.path.join(root, name)


def scan(paths):
  """(findings, unparsable files) for files and directories."""
  findings, errors = [], []
  for path in paths:
    for filename in iter_python_files(path):
      try:
        with open(filename, encoding='utf-8') as f:
          source = f.read()
        findings.extend(scan_source(source, filename))
      except (SyntaxError, UnicodeDecodeError, ValueError) as e:
        errors.append((filename, f'{type(e).__name__}: {e}'))
  return findings, errors


def report(findings, errors, out=sys.stdout):
  for finding in findings:
    print(finding.format(), file=out)
  for filename, why in errors:
    print(f'{filename}: not scanned ({why})', file=out)
  counts = collections.Counter(f.status for f in findings)
  names = collections.Counter((f.name, f.status) for f in findings)
  print('', file=out)
  print(f'flaxlegacy check: {len(findings)} legacy uses of {len(names)} names: '
        f'{counts[SUPPORTED]} supported, {counts[UNSUPPORTED]} unsupported'
        + (f'; {len(errors)} files not scanned' if errors else ''), file=out)
  unsupported = sorted({n for n, s in names if s == UNSUPPORTED})
  if unsupported:
    print('unsupported: ' + ', '.join(unsupported), file=out)


# --- coverage table for the docs --------------------------------------------


def coverage_markdown():
  """docs/coverage.md, generated from the table (tests keep it in sync)."""
  lines = [
      '# Coverage of legacy names',
      '',
      'Generated from `flaxlegacy/_names.py` by '
      '`python -m flaxlegacy.migrate.check --coverage-md`; a test fails when '
      'this file and the table disagree. "since-until" are legacy Flax '
      'versions (or the JAX version that removed a name).',
      '',
      '## Module paths served by the import hook',
      '',
      '| legacy path | served by | versions | today |',
      '| --- | --- | --- | --- |',
  ]
  for e in _names.MODULES:
    lines.append(f'| `{e.legacy}` | `{e.target or "jax.config (object)"}` | '
                 f'{_versions(e.since, e.until)} | {e.modern or ""} |')
  lines += ['', '## Names', '', '| legacy name | versions | today |',
            '| --- | --- | --- |']
  alias_names = {a.owner + '.' + a.name for a in _names.ALIASES}
  for name in sorted(_names.SYMBOLS):
    if name.startswith('jax') or name in alias_names:
      continue
    s = _names.SYMBOLS[name]
    lines.append(f'| `{name}` | {_versions(s.since, s.until)} | '
                 f'{s.modern or ""} |')
  for title, table in (
      ('JAX names added where absent (at activation)',
       _names.JAX_ALIASES + _names.JAX_REMOVED_API),
      ('Private names of flax modules added where absent (at activation)',
       _names.FLAX_PRIVATE_ALIASES),
      ('NumPy names added where absent (at activation)',
       _names.NUMPY_ALIASES),
      ('Python names added where absent (at activation)',
       _names.PYTHON_ALIASES)):
    lines += ['', f'## {title}', '',
              '| name | replacement | removed | today | faithful |',
              '| --- | --- | --- | --- | --- |']
    for a in table:
      lines.append(f'| `{a.owner}.{a.name}` | `{a.value}` | {a.removed} | '
                   f'{a.modern} | '
                   f'{"yes" if a.faithful else "approximately"} |')
  lines += ['', '## Names that exist with another meaning (not overridden)',
            '', '| name | why |', '| --- | --- |']
  for name, why in sorted(_names.CHANGED_MEANING.items()):
    lines.append(f'| `{name}` | {why} |')
  lines += ['', '## Policies (applied at activation)', '',
            '| policy | setting -> legacy value | opt out | why |',
            '| --- | --- | --- | --- |']
  for p in _names.POLICIES:
    lines.append(f'| {p.name} | `{p.setting}={p.legacy_value}` | '
                 f'`{p.env}=modern` | {p.doc} |')
  lines += ['', '## Changed JAX, NumPy and Flax behaviour restored '
            '(at activation)', '',
            '| behaviour | changed in | opt out | what legacy code gets |',
            '| --- | --- | --- | --- |']
  for b in _names.BEHAVIOURS:
    lines.append(f'| {b.name} | {b.changed} | `{b.env}=modern` | {b.doc} |')
  lines += ['', '## Not provided', '', '| name | why |', '| --- | --- |']
  for name, why in sorted(_names.UNSUPPORTED.items()):
    lines.append(f'| `{name}` | {why} |')
  return '\n'.join(lines) + '\n'


# --- command line ------------------------------------------------------------


def add_arguments(parser):
  parser.add_argument('paths', nargs='*', metavar='PATH',
                      help='Python files or directories to scan')
  parser.add_argument('--json', action='store_true',
                      help='print the findings as JSON')
  parser.add_argument('--coverage-md', action='store_true',
                      help='print the coverage table (docs/coverage.md)')


def run(args):
  if args.coverage_md:
    sys.stdout.write(coverage_markdown())
    return 0
  # Importing the legacy API (to see what it provides) must not print the
  # legacy-mode announcement into the report.
  import logging  # pylint: disable=g-import-not-at-top
  logging.getLogger('flaxlegacy').setLevel(logging.ERROR)
  if not args.paths:
    print('flaxlegacy check: give at least one PATH', file=sys.stderr)
    return 2
  missing = [p for p in args.paths if not os.path.exists(p)]
  if missing:
    print(f'flaxlegacy check: no such file or directory: {missing[0]}',
          file=sys.stderr)
    return 2
  findings, errors = scan(args.paths)
  if args.json:
    json.dump({'findings': [dataclasses.asdict(f) for f in findings],
               'not_scanned': [{'path': p, 'why': w} for p, w in errors]},
              sys.stdout, indent=1)
    sys.stdout.write('\n')
  else:
    report(findings, errors)
  return 1 if any(f.status == UNSUPPORTED for f in findings) else 0


def main(argv=None):
  import argparse  # pylint: disable=g-import-not-at-top
  parser = argparse.ArgumentParser(prog='flaxlegacy check')
  add_arguments(parser)
  return run(parser.parse_args(argv))


if __name__ == '__main__':
  sys.exit(main())
