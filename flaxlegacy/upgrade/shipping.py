"""The helpers an upgraded tree uses, written into the tree itself.

The rules name the helpers they emit by their home in flaxlegacy
(``from flaxlegacy.migrate import legacy_optax``, ``upgraded as
legacy_rng``, ``upgraded_layers``, ``legacy_cells``,
``upgraded_attention.legacy_attention_mask``, ``upgraded_cache``; ``from flaxlegacy.compat import
xla_bridge`` for the removed ``jax.lib.xla_bridge``): plain linen / optax /
NumPy code, tested there.  An upgraded tree must not need flaxlegacy, so
``upgrade_paths`` (--out, --in-place, --diff) copies the definitions the
tree uses, with what they depend on, into one module beside the code,
``legacy_helpers.py`` (docs/decisions.md: vendored, not a runtime package),
and points the imports at it.  ``upgrade_source`` (one string, no tree)
keeps the flaxlegacy imports.

Where the copy goes: code that imports its siblings as a package
(``from sam.sam_jax.efficientnet import optim``) gets one copy at the top of
that package inside the tree, imported the same way (``from sam import
legacy_helpers``), so every module of the package shares one copy (and one
``stochastic`` frame stack); code that imports its siblings by bare name
(``import models``, the legacy examples) gets a copy in its own directory
(``import legacy_helpers``); a package that only imports itself relatively
gets ``from . import legacy_helpers``.  The copy lists what it holds in
``__all__`` and in upgrade.json (``shipped``); a later upgrade of the tree
adds to it.
"""

import ast
import collections
import dataclasses
import os
import re
from typing import List, Optional

import libcst as cst

PACKAGE = 'flaxlegacy.migrate'
# The flaxlegacy modules the rules emit imports of, in the order their
# definitions are written (none imports another): plain JAX / linen / optax.
MODULES = tuple(f'{PACKAGE}.{m}' for m in (
    'legacy_optax', 'upgraded', 'upgraded_layers', 'legacy_cells',
    'upgraded_attention', 'upgraded_cache')) + (
        # jax.lib.xla_bridge (removed from JAX) -> its flaxlegacy stand-in
        # (rules/jax_names.py, the names table)
        'flaxlegacy.compat.xla_bridge',
        # jax.lib.xla_client's PaddingType (rules/early_linen/
        # removed_modules.py)
        'flaxlegacy.compat.xla_client')
NAME = 'legacy_helpers'
HEADER = '# Written by flaxlegacy upgrade'
_DOC = '"""Helpers for code upgraded from legacy Flax (flax.nn / flax.optim)."""'
ALL = '*'  # a helper module used as a whole value: every public name


def _source_path(module):
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))
  return os.path.join(root, *module.split('.')) + '.py'


@dataclasses.dataclass
class _Definition:
  name: str
  module: str
  index: int  # statement order in its module
  source: str
  uses: set


class _Helpers:
  """The top-level definitions and imports of the helper modules."""

  def __init__(self):
    self.defs = {}  # name -> _Definition
    self.imports = {}  # local name -> import statement source
    self.import_of = {}  # module -> [local names it imports], in order
    self.public = {}  # module -> public names
    for module in MODULES:
      self._read(module)

  def _read(self, module):
    with open(_source_path(module), encoding='utf-8') as f:
      text = f.read()
    lines = text.splitlines()
    tree = ast.parse(text)
    self.import_of[module] = []
    self.public[module] = []
    for index, stmt in enumerate(tree.body):
      if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        for a in stmt.names:
          local = a.asname or a.name.split('.')[0]
          if isinstance(stmt, ast.Import):
            src = (f'import {a.name} as {a.asname}' if a.asname else
                   f'import {a.name}')
          else:
            src = (f'from {stmt.module} import {a.name}'
                   + (f' as {a.asname}' if a.asname else ''))
          if self.imports.get(local, src) != src:
            raise RuntimeError(f'helper modules bind {local} differently: '
                               f'{self.imports[local]} / {src}')
          self.imports[local] = src
          self.import_of[module].append(local)
        continue
      if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
        continue  # the module docstring
      names = _defined(stmt)
      if names is None:
        raise RuntimeError(f'{module}.py:{stmt.lineno}: a top-level statement '
                           'the helper copy cannot carry')
      if names == ['__all__'] or names in (['__getattr__'], ['__dir__']):
        # a module's attribute hooks serve the layer's stand-in module
        # (compat/xla_client.py), never names the upgraded tree imports
        continue
      start = min([stmt.lineno] + [d.lineno for d in getattr(
          stmt, 'decorator_list', ())])
      while start > 1 and lines[start - 2].lstrip().startswith('#'):
        start -= 1  # the comment block right above belongs to it
      source = '\n'.join(lines[start - 1:stmt.end_lineno])
      uses = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
      for name in names:
        if name in self.defs:
          raise RuntimeError(f'helper modules both define {name}: '
                             f'{self.defs[name].module}, {module}')
        self.defs[name] = _Definition(name, module, index, source, uses)
        if not name.startswith('_'):
          self.public[module].append(name)

  def closure(self, wanted):
    """The definitions ``wanted`` (names) need, themselves included."""
    todo, seen = list(wanted), set()
    while todo:
      name = todo.pop()
      if name in seen:
        continue
      if name not in self.defs:
        raise KeyError(name)
      seen.add(name)
      todo.extend(u for u in self.defs[name].uses
                  if u in self.defs and u not in seen)
    return seen

  def source(self, wanted):
    """The helper module holding ``wanted`` (names) and what they need."""
    names = self.closure(wanted)
    defs = sorted((self.defs[n] for n in names),
                  key=lambda d: (MODULES.index(d.module), d.index))
    used = set().union(*(d.uses for d in defs)) if defs else set()
    imports = []
    for module in MODULES:
      for local in self.import_of[module]:
        src = self.imports[local]
        if local in used and src not in imports:
          imports.append(src)
    origins = collections.OrderedDict()
    for n in sorted(wanted, key=lambda n: (MODULES.index(
        self.defs[n].module), n)):
      origins.setdefault(self.defs[n].module, []).append(n)
    what = '; '.join(f'{m}: {", ".join(ns)}' for m, ns in origins.items())
    if len({m.rpartition('.')[0] for m in origins}) == 1:
      what = what.replace(next(iter(origins)).rpartition('.')[0] + '.', '')
    from flaxlegacy import version  # pylint: disable=g-import-not-at-top
    head = [f'{HEADER} {version.__version__}: the flaxlegacy helpers '
            'that the upgraded code beside this file uses, with what they '
            f'need ({what}).',
            '# Plain JAX, Flax linen, optax and NumPy: nothing here needs '
            'flaxlegacy. A later upgrade of the tree adds to this file; once '
            'the port is done it is yours to edit or fold into your own '
            'modules.']
    out = '\n'.join(_wrap_comments(head)) + '\n' + _DOC + '\n\n'
    std = [i for i in imports if _stdlib(i)]
    third = [i for i in imports if not _stdlib(i)]
    out += '\n'.join(sorted(std, key=_import_key)) + ('\n\n' if std else '')
    out += '\n'.join(sorted(third, key=_import_key)) + '\n\n'
    out += '\n'.join(_wrap_list('__all__ = [', [repr(n) for n in sorted(
        wanted)], ']')) + '\n'
    last = None
    for d in defs:
      if d.source == last:
        continue  # one statement defining several names
      out += '\n\n' + d.source + '\n'
      last = d.source
    return out


def _stdlib(src):
  import sys  # pylint: disable=g-import-not-at-top
  return src.split()[1].split('.')[0] in sys.stdlib_module_names


def _wrap_list(opening, items, closing, width=79):
  lines, line = [], opening
  for i, item in enumerate(items):
    piece = item + (', ' if i < len(items) - 1 else closing)
    if len(line) + len(piece.rstrip()) > width:
      lines.append(line.rstrip())
      line = ' ' * len(opening) + piece
    else:
      line += piece
  if not items:
    line += closing
  lines.append(line)
  return lines


def _import_key(src):
  # plain imports, then from-imports, each alphabetical (the house style)
  return (src.startswith('from '), src)


def _wrap_comments(lines, width=79):
  out = []
  for line in lines:
    while len(line) > width:
      cut = line.rfind(' ', 0, width)
      out.append(line[:cut])
      line = '# ' + line[cut + 1:]
    out.append(line)
  return out


def _defined(stmt):
  if isinstance(stmt, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
    return [stmt.name]
  if isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name)
                                          for t in stmt.targets):
    return [t.id for t in stmt.targets]
  if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
    return [stmt.target.id]
  return None


_HELPERS = None


def helpers():
  global _HELPERS
  if _HELPERS is None:
    _HELPERS = _Helpers()
  return _HELPERS


def helper_source(names):
  """The source of a helper module holding ``names`` (tests, tools)."""
  return helpers().source(set(names))


# --- what a file uses ------------------------------------------------------


def _helper_module(dotted):
  """``dotted`` if it names a helper module, else None."""
  return dotted if dotted in MODULES else None


_STATEMENT_FIELDS = ('body', 'orelse', 'finalbody', 'handlers', 'cases')


def _statements(tree):
  """Every statement of an ``ast`` tree (imports can be at any depth, but
  only where statements are: bodies, else / finally parts, except
  handlers and match cases), without walking the expressions, which are
  most of the nodes."""
  out = []
  todo = [tree]
  while todo:
    node = todo.pop()
    for field in _STATEMENT_FIELDS:
      children = getattr(node, field, None)
      if children and isinstance(children, list):
        for child in reversed(children):
          if isinstance(child, ast.stmt):
            out.append(child)
          todo.append(child)  # (an except handler or match case: its body)
  return out


def _nodes(tree):
  """Every node of an ``ast`` tree (``ast.walk``'s, in another order),
  without a generator per node (speed: half of ``ast.walk``'s time)."""
  out = []
  todo = [tree]
  pop, push, ast_node = todo.pop, todo.append, ast.AST
  while todo:
    node = pop()
    out.append(node)
    for field in node._fields:
      value = getattr(node, field, None)
      if type(value) is list:
        for child in value:
          if isinstance(child, ast_node):
            push(child)
      elif isinstance(value, ast_node):
        push(value)
  return out


def _ast_of(code):
  try:
    return ast.parse(code)
  except SyntaxError:
    return None


def uses(code, tree=None):
  """{helper module: names used (or ALL)} of a file's flaxlegacy imports
  (``tree``: ``code``'s ``ast``, if the caller has it)."""
  if tree is None:
    tree = _ast_of(code)
  if tree is None:
    return {}
  locals_ = {}  # local name -> helper module (a module imported as a value)
  out = collections.defaultdict(set)
  for node in _statements(tree):
    if isinstance(node, ast.ImportFrom) and node.level == 0:
      if any(f'{node.module}.{a.name}' in MODULES for a in node.names):
        for a in node.names:
          if f'{node.module}.{a.name}' in MODULES:
            locals_[a.asname or a.name] = f'{node.module}.{a.name}'
      elif _helper_module(node.module):
        for a in node.names:
          out[_helper_module(node.module)].add(
              ALL if a.name == '*' else a.name)
    elif isinstance(node, ast.Import):
      for a in node.names:
        m = _helper_module(a.name)
        if m and a.asname:
          locals_[a.asname] = m
        elif m:
          out[m].add(ALL)  # flaxlegacy.migrate.X.name spelled out
  if locals_:  # (one walk: the attributes, then the bare names)
    attrs, names = set(), []
    for node in _nodes(tree):
      if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
          and node.value.id in locals_):
        attrs.add(id(node.value))
        out[locals_[node.value.id]].add(node.attr)
      elif (isinstance(node, ast.Name) and node.id in locals_
            and isinstance(node.ctx, ast.Load)):
        names.append(node)
    for node in names:
      if id(node) not in attrs:
        out[locals_[node.id]].add(ALL)
  return dict(out)


def names_of(used):
  """The helper names ``uses(...)`` stands for."""
  h = helpers()
  names = set()
  for module, ns in used.items():
    for n in ns:
      if n == ALL:
        names.update(h.public[module])
      elif n in h.defs and h.defs[n].module == module:
        names.add(n)
      else:
        raise ValueError(f'flaxlegacy upgrade: {module} has no '
                         f'{n} to copy into the upgraded tree')
  return names


# --- where the copy goes ---------------------------------------------------


@dataclasses.dataclass
class Home:
  """Where one directory's code finds its helper copy."""
  dir_abs: str  # the source directory the copy belongs in
  how: str  # 'bare' | 'package' | 'relative'
  package: str = ''  # dotted package of dir_abs ('package')


def _imports_of(code):
  """(absolute dotted names imported, whether any import is relative)."""
  try:
    tree = ast.parse(code)
  except SyntaxError:
    return set(), False
  names, relative = set(), False
  for node in _statements(tree):
    if isinstance(node, ast.Import):
      for a in node.names:
        names.add(a.name)
    elif isinstance(node, ast.ImportFrom):
      if node.level:
        relative = True
      elif node.module:
        names.add(node.module)
        names.update(f'{node.module}.{a.name}' for a in node.names)
  return names, relative


def _imports_of_module(module):
  """``_imports_of`` read from the file's libcst tree, which the parse
  made (no second parse with ``ast``): the imports of every statement
  body, as ``_statements`` walks them."""
  names, relative = set(), False
  todo = [module]
  while todo:
    node = todo.pop()
    if isinstance(node, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
      for small in node.body:
        if isinstance(small, cst.Import):
          names.update(_dotted(a.name) for a in small.names)
        elif isinstance(small, cst.ImportFrom):
          if small.relative:
            relative = True
          elif small.module is not None:
            module_name = _dotted(small.module)
            names.add(module_name)
            if isinstance(small.names, cst.ImportStar):
              names.add(f'{module_name}.*')
            else:
              names.update(f'{module_name}.{_dotted(a.name)}'
                           for a in small.names)
      continue
    # compound statements: their suites, else / except / finally parts
    # and match cases (expressions hold no statement)
    for field in ('body', 'orelse', 'handlers', 'finalbody', 'cases'):
      child = getattr(node, field, None)
      if isinstance(child, (list, tuple)):
        todo.extend(child)
      elif child is not None:
        todo.append(child)
  return names, relative


def homes(files):
  """{source dir: Home} for the directories of ``files`` (SourceFiles).

  Evidence first: how the codebase imports the modules of a directory
  (``a.b.m`` for ``.../a/b/m.py``: package ``a.b``; ``m``: bare); without
  any, a directory with ``__init__.py`` whose files import relatively is
  'relative', else the ``__init__.py`` chain inside the source root gives
  the package, else 'bare'.
  """
  imported = collections.Counter()
  dir_imports = collections.defaultdict(set)
  relative_dirs = set()
  roots = {}
  for sf in files:
    roots[os.path.dirname(os.path.abspath(sf.path))] = os.path.abspath(
        sf.src_root)
    if getattr(sf, 'module', None) is not None:
      names, relative = _imports_of_module(sf.module)
    else:
      names, relative = _imports_of(sf.code or '')
    imported.update(names)
    dir_imports[os.path.dirname(os.path.abspath(sf.path))] |= names
    if relative:
      relative_dirs.add(os.path.dirname(os.path.abspath(sf.path)))
  by_dir = collections.defaultdict(collections.Counter)
  for sf in files:
    rel = os.path.relpath(os.path.abspath(sf.path), os.path.abspath(
        sf.src_root)).split(os.sep)
    stem = rel[-1][:-3]
    mod = rel[:-1] + ([stem] if stem != '__init__' else [])
    if not mod:
      continue
    d = os.path.dirname(os.path.abspath(sf.path))
    for dotted, count in imported.items():
      comps = dotted.split('.')
      n = min(len(comps), len(mod))
      # the shorter names the longer's last modules; the import may name
      # packages above the source root (``sam.sam_jax...`` for a root
      # that is the sam package, whatever its directory is called)
      if comps[-n:] != mod[-n:] or (n < 2 and len(comps) > 1):
        continue
      by_dir[d][tuple(comps[:-1] if stem != '__init__' else comps)] += count
  out = {}
  for d, root in roots.items():
    evidence = by_dir.get(d)
    if evidence:
      prefix = max(evidence.items(), key=lambda kv: (kv[1], len(kv[0])))[0]
      out[d] = _home_of(d, root, list(prefix))
    elif os.path.exists(os.path.join(d, '__init__.py')) and (
        d in relative_dirs):
      out[d] = Home(d, 'relative')
    elif os.path.exists(os.path.join(d, '__init__.py')):
      top, comps = d, [os.path.basename(d)]
      while top != root and os.path.exists(os.path.join(
          os.path.dirname(top), '__init__.py')):
        top = os.path.dirname(top)
        comps.insert(0, os.path.basename(top))
      out[d] = _home_of(d, root, comps)
    else:
      out[d] = Home(d, 'bare')
  # A directory of bare-imported scripts (a driver, a tests folder given as
  # another source root) that imports a package of the tree shares that
  # package's copy: one Model class and one stochastic / stateful frame
  # stack for both (two copies: a model made by the package and applied by
  # the script failed the other copy's isinstance, and a script's
  # ``stateful`` block was not seen by the package's models).
  packages = {h.package: h for h in out.values() if h.how == 'package'}
  for d, home in list(out.items()):
    if home.how != 'bare':
      continue
    used = {h.dir_abs: h for pkg, h in packages.items()
            if any(n == pkg or n.startswith(pkg + '.')
                   for n in dir_imports.get(d, ()))}
    if len(used) == 1:
      out[d] = next(iter(used.values()))
  return out


def _home_of(d, root, prefix):
  """The copy for directory ``d`` whose modules are ``prefix.m``: at the
  highest directory of the package inside the source root."""
  if not prefix:
    return Home(d, 'bare')
  dirs = [d]
  for _ in prefix[1:]:
    dirs.insert(0, os.path.dirname(dirs[0]))
  # dirs[i] is the directory of package prefix[:i + 1]
  for i, p in enumerate(dirs):
    if p == root or p.startswith(root.rstrip(os.sep) + os.sep):
      return Home(p, 'package', '.'.join(prefix[:i + 1]))
  return Home(d, 'bare')


# --- rewriting the imports -------------------------------------------------


def _import_lines(home, module_name, local, names=None):
  """Import statement sources binding what the flaxlegacy import bound."""
  if names is None:  # a helper module bound to ``local``
    if home.how == 'bare':
      return [f'import {module_name}' if local == module_name else
              f'import {module_name} as {local}']
    src = 'from .' if home.how == 'relative' else f'from {home.package}'
    return [f'{src} import {module_name}' + (
        '' if local == module_name else f' as {local}')]
  mod = {'bare': module_name, 'relative': f'.{module_name}',
         'package': f'{home.package}.{module_name}'}[home.how]
  return [f'from {mod} import {", ".join(names)}']


def _split_import(stmt, keep, lines):
  """The statements an import becomes: what it keeps of its own names (if
  any), then the helper copy's import ``lines``; None when nothing moves."""
  if not lines:
    return None
  out = [cst.parse_statement(l + '\n').body[0] for l in lines]
  if keep:
    out.insert(0, stmt.with_changes(names=_commas(keep)))
  return out


class _Imports(cst.CSTTransformer):
  """``from flaxlegacy.migrate import X as L`` -> the copy's import."""

  def __init__(self, home, module_name):
    super().__init__()
    self.home = home
    self.module_name = module_name

  def on_visit(self, node):
    # Imports are the small statements of a line: nothing inside one, or
    # inside an expression, is rewritten (not walking them is speed).
    super().on_visit(node)
    return not isinstance(node, (cst.SimpleStatementLine, cst.BaseExpression))

  def _replace(self, stmt):
    if isinstance(stmt, cst.ImportFrom) and not stmt.relative and not (
        isinstance(stmt.names, cst.ImportStar)):
      mod = _dotted(stmt.module)
      if any(f'{mod}.{_dotted(a.name)}' in MODULES for a in stmt.names):
        keep, lines = [], []
        for a in stmt.names:
          name = _dotted(a.name)
          local = a.asname.name.value if a.asname else name
          if f'{mod}.{name}' in MODULES:
            lines += _import_lines(self.home, self.module_name, local)
          else:
            keep.append(a)
        return _split_import(stmt, keep, lines)
      if _helper_module(mod):
        names = [_dotted(a.name) + (f' as {a.asname.name.value}'
                                    if a.asname else '')
                 for a in stmt.names]
        lines = _import_lines(self.home, self.module_name, None, names)
        return [cst.parse_statement(l + '\n').body[0] for l in lines]
    if isinstance(stmt, cst.Import):
      keep, lines = [], []
      for a in stmt.names:
        m = _helper_module(_dotted(a.name))
        if m and a.asname:
          lines += _import_lines(self.home, self.module_name,
                                 a.asname.name.value)
        else:
          keep.append(a)
      return _split_import(stmt, keep, lines)
    return None

  def leave_SimpleStatementLine(self, original_node, updated_node):
    body, changed = [], False
    for stmt in updated_node.body:
      new = self._replace(stmt)
      if new is None:
        body.append(stmt)
      else:
        changed = True
        body.extend(new)
    if not changed:
      return updated_node
    if len(updated_node.body) == 1:  # one import per line, as written
      lines = [cst.SimpleStatementLine(body=[s]) for s in body]
      lines[0] = lines[0].with_changes(
          leading_lines=updated_node.leading_lines)
      lines[-1] = lines[-1].with_changes(
          trailing_whitespace=updated_node.trailing_whitespace)
      return cst.FlattenSentinel(lines)
    return updated_node.with_changes(body=[
        s.with_changes(semicolon=cst.MaybeSentinel.DEFAULT) for s in body])


def _commas(names):
  names = list(names)
  return [a.with_changes(comma=cst.MaybeSentinel.DEFAULT) if i == len(
      names) - 1 else a.with_changes(comma=cst.Comma(
          whitespace_after=cst.SimpleWhitespace(' ')))
          for i, a in enumerate(names)]


def _dotted(node):
  if isinstance(node, cst.Name):
    return node.value
  if isinstance(node, cst.Attribute):
    head = _dotted(node.value)
    return None if head is None else f'{head}.{node.attr.value}'
  return None


def rewrite_imports(code, home, module_name=NAME, lines=None):
  """``code`` with its flaxlegacy helper imports pointed at the copy
  (``lines``: ``_statement_lines`` of its ``ast``, if the caller has
  them)."""
  out = _rewrite_import_lines(code, home, module_name, lines)
  if out is not None:
    return out
  return cst.parse_module(code).visit(_Imports(home, module_name)).code


def _statement_lines(tree):
  """What ``_rewrite_import_lines`` reads of a file's ``ast``: the (first,
  last) lines of its flaxlegacy imports and of its simple statements, and
  the first lines of its compound statements."""
  stmts = _statements(tree)
  wanted = [(n.lineno, n.end_lineno) for n in stmts
            if isinstance(n, (ast.Import, ast.ImportFrom))
            and ('flaxlegacy' in (getattr(n, 'module', None) or '') or any(
                'flaxlegacy' in a.name for a in n.names))]
  compound_lines = {n.lineno for n in stmts if hasattr(n, 'body')}
  simple = sorted(((n.lineno, n.end_lineno) for n in stmts
                   if not hasattr(n, 'body')))
  return wanted, compound_lines, simple


def _rewrite_import_lines(code, home, module_name, lines=None):
  """``rewrite_imports`` by rewriting only the lines of the statements that
  import from flaxlegacy (found with ``ast``, each parsed alone with libcst
  and rewritten by the same ``_Imports``); None where that is not certain
  to give what the whole-file rewrite gives (an import sharing its line
  with a compound statement, lines not indented alike, a bare CR)."""
  if '\r' in code.replace('\r\n', ''):
    return None
  if lines is None:
    tree = _ast_of(code)
    if tree is None:
      return None
    lines = _statement_lines(tree)
  wanted, compound_lines, simple = lines
  if not wanted:
    return code
  ranges = []
  for start, end in sorted(wanted):
    grown = True
    while grown:  # the simple statements sharing these lines
      grown = False
      for s, e in simple:
        if s <= end and e >= start and (s < start or e > end):
          start, end, grown = min(s, start), max(e, end), True
    if any(start <= l <= end for l in compound_lines):
      return None
    if ranges and start <= ranges[-1][1]:
      ranges[-1] = (ranges[-1][0], max(end, ranges[-1][1]))
    else:
      ranges.append((start, end))
  lines = re.split(r'(?<=\n)', code)
  for start, end in reversed(ranges):
    chunk = lines[start - 1:end]
    indent = chunk[0][:len(chunk[0]) - len(chunk[0].lstrip(' \t'))]
    if not all(l.startswith(indent) for l in chunk):
      return None
    text = ''.join(l[len(indent):] for l in chunk)
    try:
      new = cst.parse_module(text).visit(_Imports(home, module_name)).code
    except cst.ParserSyntaxError:
      return None
    lines[start - 1:end] = [indent + l for l in re.split(r'(?<=\n)', new)
                            if l]
  return ''.join(lines)


# --- the whole tree --------------------------------------------------------


@dataclasses.dataclass
class Shipped:
  """One helper copy: where it goes and what it holds."""
  path: str  # source-side path (in SRC; mirrored under --out)
  rel: str  # path relative to the output root
  module: str  # its module name
  spelling: str  # how the code imports it
  names: List[str]
  code: str = ''
  source_file: Optional[object] = None  # the SourceFile if SRC has it

  def as_dict(self):
    h = helpers()
    return {'path': self.rel, 'module': self.module, 'import': self.spelling,
            'names': {n: f'{h.defs[n].module}.{n}' for n in self.names}}


def _ours(path):
  try:
    with open(path, encoding='utf-8') as f:
      return f.readline().startswith(HEADER)
  except OSError:
    return False


def _existing_names(code):
  m = re.search(r'^__all__ = \[(.*?)\]$', code or '', re.M | re.S)
  if not m:
    return set()
  return {s.strip().strip('\'"') for s in m.group(1).split(',') if s.strip()}


def ship(files):
  """Points every upgraded file's flaxlegacy helper imports at a copy in
  the tree and returns the copies (``Shipped``); ``files``: the driver's
  SourceFiles, whose ``new_code`` is rewritten here."""
  need = {}
  lines = {}  # upgraded text -> its _statement_lines (one ast parse each)
  for sf in files:
    if sf.new_code is None or 'flaxlegacy' not in sf.new_code:
      continue
    tree = _ast_of(sf.new_code)
    used = uses(sf.new_code, tree)
    if used:
      need[sf] = names_of(used)
      lines[sf.new_code] = _statement_lines(tree)
  if not need:
    return []
  where = homes([sf for sf in files if sf.code is not None])
  by_path = {os.path.normpath(os.path.abspath(sf.path)): sf for sf in files}
  groups = collections.OrderedDict()  # copy dir -> (Home, [SourceFile])
  for sf, _ in sorted(need.items(), key=lambda kv: kv[0].rel):
    home = where[os.path.dirname(os.path.abspath(sf.path))]
    groups.setdefault(home.dir_abs, (home, []))[1].append(sf)
  shipped = []
  for dir_abs, (home, members) in groups.items():
    module_name, existing = NAME, None
    n = 1
    while True:
      path = os.path.join(dir_abs, module_name + '.py')
      if not os.path.exists(path) or _ours(path):
        existing = by_path.get(os.path.normpath(path))
        break
      n += 1
      module_name = f'{NAME}_{n}'
    names = set().union(*(need[sf] for sf in members))
    if existing is not None:
      names |= {x for x in _existing_names(existing.code)
                if x in helpers().defs}
    # (a file of the copy's own source root: members may come from another
    # root whose layout in the output is not the sources')
    first = next((sf for sf in files if path.startswith(
        os.path.abspath(sf.src_root).rstrip(os.sep) + os.sep)), members[0])
    rel = os.path.normpath(os.path.join(
        os.path.dirname(first.rel), os.path.relpath(
            path, os.path.dirname(os.path.abspath(first.path)))))
    spelling = {'bare': module_name, 'relative': f'.{module_name}',
                'package': f'{home.package}.{module_name}'}[home.how]
    item = Shipped(path=path, rel=rel, module=module_name, spelling=spelling,
                   names=sorted(names), source_file=existing)
    item.code = helpers().source(names)
    if existing is not None:
      existing.new_code = item.code
    for sf in members:
      sf.new_code = rewrite_imports(sf.new_code, home, module_name,
                                    lines.get(sf.new_code))
    shipped.append(item)
  return shipped
