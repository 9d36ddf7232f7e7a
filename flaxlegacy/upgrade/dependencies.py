"""Installed dependencies that use JAX names today's JAX removed.

The upgrade rewrites the codebase, not the packages it imports.  In a
legacy process the layer serves removed JAX names to every module, the
codebase's dependencies included (``jax.tree_leaves`` to jraph 0.0.6.dev0,
its latest release); the upgraded code runs without the layer, so a
dependency that still calls a removed name fails there, inside the
dependency, at no line of the codebase.

This pass finds such dependencies where the upgrade runs: for each
top-level package the codebase imports (not its own, not the standard
library, not JAX or Flax), the installed distribution that provides it,
if that distribution requires ``jax``, is read (its ``.py`` files, parsed,
never imported) for the removed ``jax.*`` names of the same table the layer
serves (rules/jax_names.py).  A use under ``try`` with an ``except`` that
catches ``AttributeError`` / ``ImportError`` (a fallback) does not count,
nor do the distribution's own test files.
The rewriters put a TODO on each import of such a package
(rules/rewriter.py); the report lists them (``stale_dependencies``).

What it reads is the environment the upgrade runs in, so the answer is
about that installation: the TODO says which version it read.
"""

import ast
import importlib.metadata as metadata
import importlib.util
import os
import re
import sys

# JAX itself and the upgrade's own targets: never a stale dependency here
_SKIP = frozenset({'jax', 'jaxlib', 'flax', 'flaxlegacy'})
_REQUIREMENT_NAME = re.compile(r'^\s*([A-Za-z0-9][A-Za-z0-9._-]*)')
_EXTRA = re.compile(r'\bextra\s*==')
_GUARDS = frozenset({'AttributeError', 'ImportError', 'ModuleNotFoundError',
                     'Exception', 'BaseException'})


def removed_names(jax_names):
  """Qualified removed ``jax.*`` names, from rules/jax_names.py's tables
  (passed in: this pass reads facts, the rules read it)."""
  names = set()
  for table in (jax_names.RENAMES, jax_names.MODULE_RENAMES,
                jax_names.UNSURE, jax_names.CALLS):
    names.update(q for q in table if q.startswith('jax.'))
  return frozenset(names)


def _requires_jax(dist):
  for req in dist.requires or ():
    if _EXTRA.search(req):  # only with an extra
      continue
    m = _REQUIREMENT_NAME.match(req)
    if m and m.group(1).lower() in ('jax', 'jaxlib'):
      return True
  return False


class _Uses(ast.NodeVisitor):
  """Uses of removed ``jax.*`` names in one file, outside fallbacks."""

  def __init__(self, table):
    self.table = table
    self.aliases = {}  # local name -> qualified module / name
    self.guarded = 0
    self.found = []  # (qualified name, line)

  def visit_Import(self, node):
    for a in node.names:
      if a.asname:
        self.aliases[a.asname] = a.name
      else:
        self.aliases[a.name.split('.')[0]] = a.name.split('.')[0]
      self._check(a.name, node.lineno)

  def visit_ImportFrom(self, node):
    if node.module and not node.level:
      self._check(node.module, node.lineno)
      for a in node.names:
        q = f'{node.module}.{a.name}'
        self.aliases[a.asname or a.name] = q
        self._check(q, node.lineno)

  def visit_Try(self, node):
    guarded = any(self._catches(h.type) for h in node.handlers)
    self.guarded += guarded
    for stmt in node.body:
      self.visit(stmt)
    self.guarded -= guarded
    for part in (node.handlers, node.orelse, node.finalbody):
      for stmt in part:
        self.visit(stmt)

  visit_TryStar = visit_Try

  @staticmethod
  def _catches(expr):
    if expr is None:
      return True
    names = expr.elts if isinstance(expr, ast.Tuple) else [expr]
    return any(isinstance(n, ast.Name) and n.id in _GUARDS or (
        isinstance(n, ast.Attribute) and n.attr in _GUARDS) for n in names)

  def visit_Attribute(self, node):
    parts = []
    head = node
    while isinstance(head, ast.Attribute):
      parts.append(head.attr)
      head = head.value
    if isinstance(head, ast.Name) and head.id in self.aliases:
      q = '.'.join([self.aliases[head.id]] + parts[::-1])
      # the longest removed prefix (jax.experimental.optimizers.adam: the
      # module)
      while q.count('.'):
        if self._check(q, node.lineno):
          return
        q = q.rsplit('.', 1)[0]
      return
    self.generic_visit(node)

  def _check(self, q, line):
    if q in self.table and not self.guarded:
      self.found.append((q, line))
      return True
    return False


def _scan_dist(dist, top, table, word):
  uses = []
  for f in dist.files or ():
    if f.suffix != '.py' or not f.parts or f.parts[0] != top:
      continue
    # its own tests are not what the codebase runs
    if f.name.startswith('test_') or f.stem.endswith('_test') or any(
        p in ('tests', 'test', 'testing') for p in f.parts[:-1]):
      continue
    path = dist.locate_file(f)
    try:
      with open(path, encoding='utf-8') as fh:
        text = fh.read()
    except (OSError, UnicodeDecodeError):
      continue
    if 'jax' not in text or not word.search(text):
      continue
    try:
      tree = ast.parse(text)
    except SyntaxError:
      continue
    v = _Uses(table)
    v.visit(tree)
    uses.extend((q, '/'.join(f.parts), line) for q, line in v.found)
  return uses


def _distributions(top):
  """The installed distributions providing top-level module ``top``
  (located without importing it)."""
  try:
    return [metadata.distribution(top)]
  except (metadata.PackageNotFoundError, ValueError):
    pass
  try:
    spec = importlib.util.find_spec(top)
  except (ImportError, ValueError):
    return []
  if spec is None:
    return []
  places = list(spec.submodule_search_locations or ()) or (
      [spec.origin] if spec.origin not in (None, 'built-in', 'frozen')
      else [])
  found = []
  for site in {os.path.dirname(p) for p in places}:
    # a distribution named otherwise (PyYAML: yaml), in the same directory
    for dist in metadata.distributions(path=[site]):
      top_level = dist.read_text('top_level.txt')
      if top_level is not None:
        if top in top_level.split():
          found.append(dist)
      else:
        record = dist.read_text('RECORD') or ''
        if re.search(r'^' + re.escape(top) + r'(?:/|\.py,)', record, re.M):
          found.append(dist)
  return found


def _own_tops(files):
  # every part of every path: the tree's top level, and a test directory
  # run with its own root on sys.path
  return {p[:-3] if p.endswith('.py') else p
          for sf in files for p in sf.rel.replace(os.sep, '/').split('/')}


def scan(files, codebase, table):
  """{top-level package: (distribution name, version, [(removed name,
  file inside the distribution, line), ...])} for the stale dependencies
  the codebase imports; ``table``: the removed names (``removed_names``)."""
  imported = set()
  for facts in codebase.files.values():
    for q in facts.imports.values():
      top = q.split('.')[0]
      if top and not q.startswith('.'):
        imported.add(top)
  stdlib = getattr(sys, 'stdlib_module_names', frozenset())
  candidates = sorted(imported - _own_tops(files) - _SKIP - set(stdlib)
                      - set(sys.builtin_module_names))
  if not candidates:
    return {}
  word = re.compile(r'\b(?:' + '|'.join(sorted(
      {re.escape(q.rsplit('.', 1)[-1]) for q in table})) + r')\b')
  out = {}
  for top in candidates:
    dists = _distributions(top)
    for dist in dists:
      if dist.metadata is None or not _requires_jax(dist):
        continue
      uses = _scan_dist(dist, top, table, word)
      if uses:
        out[top] = (dist.metadata['Name'], dist.version,
                    sorted(set(uses), key=lambda u: (u[1], u[2], u[0])))
        break
  return out


def why(top, entry):
  """The TODO of an import of a stale dependency."""
  name, version, uses = entry
  names = sorted({q for q, _, _ in uses})
  shown = ', '.join(names[:3]) + (f' and {len(names) - 3} more'
                                  if len(names) > 3 else '')
  _, path, line = uses[0]
  return (f'{top}: {name} {version}, as installed where the upgrade ran, '
          f'uses {shown} ({path}:{line}), removed from today\'s JAX; the '
          f'upgrade rewrites only this codebase, so install a {name} that '
          'runs on today\'s JAX (its latest release may not: then its '
          'repository) or patch it')
