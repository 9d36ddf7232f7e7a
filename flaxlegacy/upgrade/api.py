"""Codebase-level driver: files in, rewritten files + report out."""

import contextlib
import difflib
import gc
import multiprocessing
import os
import re
import shutil
import sys

import libcst as cst

from flaxlegacy.upgrade import facts as facts_lib
from flaxlegacy.upgrade.analyses import attention_cache as attention_cache_facts
from flaxlegacy.upgrade import flow as flow_lib
from flaxlegacy.upgrade import positions
from flaxlegacy.upgrade import shipping
from flaxlegacy.upgrade import transform


class SourceFile:

  def __init__(self, src_root, rel, path):
    self.src_root = src_root
    self.rel = rel
    self.path = path
    self.code = None
    self.module = None
    self.error = None
    self.new_code = None
    self.statement_texts = None
    self.start_lines = None  # positions.start_lines of ``module``
    self.spans = None  # the lines of its inner statements in ``code``
    self.report = transform.FileReport()


def _walk(src):
  """(root, relative path, absolute path) of every file under ``src``."""
  src = os.path.abspath(src)
  if os.path.isfile(src):
    yield os.path.dirname(src), os.path.basename(src), src
    return
  for dirpath, dirnames, filenames in os.walk(src):
    dirnames[:] = sorted(d for d in dirnames if d not in (
        '__pycache__', '.git', '.hg', '.svn'))
    for f in sorted(filenames):
      p = os.path.join(dirpath, f)
      yield src, os.path.relpath(p, src), p


def _legacy_markers():
  """Substrings without which a file has nothing for any rule to rewrite."""
  from flaxlegacy.upgrade.rules import jax_names  # pylint: disable=g-import-not-at-top
  # init_by_shape / create_by_shape: a program that only imports a model
  # module (``from models import resnet``) and runs its legacy life cycle.
  # ``.partial(``: the same, through ``models.M50.partial(...)``.
  marks = {'nn', 'flax.deprecated', 'jax.config', 'flax.optim', 'optim',
           '_by_shape', '.partial('}
  for q in list(jax_names.RENAMES) + list(jax_names.UNSURE) + list(
      jax_names.CALLS) + list(jax_names.MODULE_RENAMES):
    marks.add(q.rsplit('.', 1)[-1])
  from flaxlegacy.upgrade.rules import early_linen  # pylint: disable=g-import-not-at-top
  marks.update(early_linen.MARKERS)
  return tuple(sorted(marks))


def _may_need_rewrite(code, markers):
  from flaxlegacy.upgrade.rules import jax_names  # pylint: disable=g-import-not-at-top
  # removed NumPy / Python names: only in files importing their module
  return any(m in code for m in markers) or (
      any(m in code for m in ('numpy', 'collections', 'inspect'))
      and bool(jax_names.REMOVED_NAME_RE.search(code)))


_IMPORT_LINE = re.compile(r'^\s*(?:from\s+\S+\s+)?import\s+.*$', re.M)


def _parse_importers(files):
  """Also parses the files that import a parsed one (a test handing a
  class to a library function): the facts pass (flow.py) follows values
  through their calls.  To a fixpoint: importers of importers too."""
  while True:
    stems = {os.path.splitext(os.path.basename(sf.rel))[0]
             for sf in files if sf.module is not None}
    stems.discard('__init__')
    if not stems:
      return
    word = re.compile(r'\b(?:' + '|'.join(sorted(map(re.escape, stems)))
                      + r')\b')
    # and the files they import (a helper module that reads ``model.params``
    # of the models a test hands it: the facts follow values into it)
    imported = set()
    for sf in files:
      if sf.module is not None:
        for line in _IMPORT_LINE.findall(sf.code):
          imported.update(re.findall(r'\w+', line))
    more = [sf for sf in files if sf.module is None and sf.error is None
            and sf.new_code is None and sf.code is not None and (any(
                word.search(line) for line in _IMPORT_LINE.findall(sf.code))
                or os.path.splitext(os.path.basename(sf.rel))[0] in imported)]
    if not more:
      return
    for sf in more:
      _parse(sf)


NAMES = ('legacy', 'linen')


def _check_names(names):
  if names not in NAMES:
    raise ValueError(f'flaxlegacy upgrade: names={names!r}: expected one of '
                     f'{", ".join(NAMES)}')


def _analyse(files, names='legacy', observed=None, configs=()):
  codebase = facts_lib.CodebaseFacts()
  codebase.names_mode = names
  for sf in files:
    if sf.module is not None:
      codebase.add(facts_lib.collect(sf.rel, sf.module,
                                     statement_texts=sf.statement_texts,
                                     code=sf.code))
  codebase.finish()
  # a legacy attention cache built, and no nn.Collection of its own
  # (analyses/attention_cache.py; rules/attention_cache.py reads it), read
  # in the files that use legacy flax.nn
  # (an upgraded file keeps a Cache it could not rewrite, with its TODO,
  # but its nn.Collection is gone: a second upgrade must decide as the
  # first did)
  codebase.attention_cache = attention_cache_facts.codebase_fact(
      sf.code for sf in files
      if sf.rel in codebase.files and codebase.files[sf.rel].nn_prefixes)
  # what each name can hold, across the codebase (flow.py)
  values = flow_lib.Flow(codebase)
  for sf in files:
    if sf.module is not None:
      values.add_file(sf.rel, sf.module, codebase.files[sf.rel],
                      sf.statement_texts)
  for text in configs:  # the tree's gin configs: their bindings
    values.add_gin_text(text)
  if observed:
    values.observe(observed)
  codebase.flow = values.solve()
  # how the call sites the value facts see pass each parameter
  codebase.split_by_call_sites()
  return codebase


def _gin_configs(others):
  """The texts of the tree's gin config files (their bindings are facts
  of the parameters they name: flow.py)."""
  out = []
  for sf in others:
    if sf.path.endswith('.gin'):
      try:
        with open(sf.path, encoding='utf-8') as fh:
          out.append(fh.read())
      except (OSError, UnicodeDecodeError):
        continue
  return out


def _parse(sf):
  try:
    sf.module = cst.parse_module(sf.code)
    # the report's lines are those of the file as written: worked out in
    # the same code generation as the statement texts (positions.py)
    sf.spans = {}
    code, sf.statement_texts, sf.start_lines = (
        positions.code_statements_and_lines(sf.module, sf.spans))
    if code != sf.code:  # (libcst writes what it read; else no spans)
      sf.spans = None
  except cst.ParserSyntaxError as e:
    line, col, msg = e.raw_line, e.raw_column, str(e).splitlines()[0]
    try:  # Python's own parser points at the offending line more exactly
      compile(sf.code, sf.path, 'exec', dont_inherit=True)
    except SyntaxError as py_error:
      line, col, msg = py_error.lineno, py_error.offset, py_error.msg
    sf.error = f'{sf.path}:{line}:{col}: syntax error: {msg}'
    sf.report.error = sf.error


@contextlib.contextmanager
def _fewer_collections():
  """Python's cyclic garbage collector, seldom (speed).  The upgrade builds
  many small objects that live long (libcst trees, facts) and little cyclic
  garbage: the default thresholds walk every live tree again and again
  (about a tenth of the CPU of an upgrade); peak memory is the same
  (benchmarks/upgrade_speed.py, docs/benchmarks.md: 95-96 MB at
  (200000, 50, 1000) as at (50000, 20, 100), about 0.1 s less CPU).
  A young collection walks every object that survived since the last one,
  and almost all of them (the trees) survive to the end: the first number
  is a million (tenth session: 96 -> 97 MB on the benchmark, 134 -> 135 MB
  on scenic, the largest corpus tree; the three collections of 200000 had
  cost about 0.09 s, and found some ten thousand objects)."""
  old = gc.get_threshold()
  gc.set_threshold(1000000, 50, 1000)
  try:
    yield
  finally:
    gc.set_threshold(*old)


def upgrade_source(code, path='<source>', names='legacy'):
  """Rewrites one source string; returns (new code, FileReport).

  ``names``: 'legacy' (default: write ``name=`` where linen's auto-name
  differs from legacy's, so legacy parameter trees load unchanged) or
  'linen' (linen's own names where known; ``FileReport.renames`` holds the
  rename-map entries, rules/linen_names.py).

  A rule that fails on the source is contained as ``upgrade_paths``
  contains it: the source comes back as it was, with the failure in
  ``FileReport.failed`` (a syntax error still raises ``SyntaxError``).
  """
  _check_names(names)
  sf = SourceFile('', path, path)
  sf.code = code
  with _fewer_collections():
    _parse(sf)
    if sf.error:
      raise SyntaxError(sf.error)
    codebase = _analyse([sf], names)
    new = _upgrade_file(sf, codebase)
  return new, sf.report


_FORKED = {}  # what forked workers read (inherited, not pickled)


def _upgrade_file(sf, codebase):
  """The file's new source; where a rule fails on a construct it does not
  know, the file as it was, the failure in the report (``failed``) and
  the run going on with the other files."""
  try:
    return transform.upgrade_module(sf.rel, sf.module, codebase, sf.report,
                                    sf.statement_texts, sf.code,
                                    start_lines=sf.start_lines,
                                    spans=sf.spans)
  except Exception as e:  # pylint: disable=broad-except
    first = str(e).splitlines()[0] if str(e) else ''
    sf.report.failed = (f'{sf.path}: the upgrade failed on this file '
                        f'({type(e).__name__}: {first}); it is left as it '
                        'was (please report the construct)')
    del sf.report.rewritten[:], sf.report.left[:], sf.report.modules[:]
    return sf.code


def _transform_one(index):
  sf = _FORKED['files'][index]
  code = _upgrade_file(sf, _FORKED['codebase'])
  return code, sf.report


def _transform_all(files, codebase):
  """Rewrites every parsed file; in 2+ forked processes for big codebases.

  Forking is used only where it is safe and pays: the platform forks, JAX
  is not loaded in this process (its threads do not survive a fork), and
  there are enough files.
  """
  todo = [i for i, sf in enumerate(files) if sf.module is not None]
  workers = min(os.cpu_count() or 1, 4)
  if (len(todo) >= 16 and workers > 1 and 'jax' not in sys.modules
      and 'fork' in multiprocessing.get_all_start_methods()):
    transform.prepare(codebase)
    _FORKED.update(files=files, codebase=codebase)
    # what the workers inherit is never collected there: frozen, the
    # collector leaves it alone (and its pages unwritten, so not copied)
    gc.freeze()
    try:
      ctx = multiprocessing.get_context('fork')
      with ctx.Pool(workers) as pool:
        for i, (code, rep) in zip(todo, pool.map(_transform_one, todo,
                                                 chunksize=4)):
          files[i].new_code, files[i].report = code, rep
      return
    finally:
      gc.unfreeze()
      _FORKED.clear()
  for i in todo:
    files[i].new_code = _upgrade_file(files[i], codebase)


def _src_names(srcs):
  """Several SRC arguments: each goes under its own name in DST, as
  ``cp -r pkg tests DST`` puts them (DST/pkg, DST/tests, DST/file.py).
  One SRC: a directory's contents are DST's, a file goes to DST/file."""
  if len(srcs) < 2:
    return {}
  names = {}
  for src in srcs:
    name = os.path.basename(os.path.normpath(os.path.abspath(src)))
    if name in names.values():
      clash = [s for s, n in names.items() if n == name][0]
      raise ValueError(f'flaxlegacy upgrade: SRC {clash} and {src} would '
                       f'both go to DST/{name}; upgrade them separately or '
                       'pass their common parent')
    names[src] = name
  return names


def upgrade_paths(srcs, out=None, in_place=False, diff=False, verify=False,
                  stdout=None, names='legacy', observe=None, verify_with=None):
  """Runs the upgrade; returns (exit status, report dict).

  ``observe``: a shell command (the codebase's tests) to run under the layer
  first: the legacy objects it shows at each call are facts too
  (observe.py).

  ``names='linen'``: leave out the ``name=`` that only reproduces a legacy
  auto-name, where linen's own name is known; the report's ``rename_map``
  says, per upgraded class, which legacy child name became which
  (``flaxlegacy.migrate.names.rename_params`` applies it).
  ``verify_with``: a shell command (the codebase's tests), run under the layer
  in SRC (one directory, --out needed) recording every module class it
  initialises; each upgraded class is then checked at those shapes
  (verify.py ``record_and_verify``; ``report['verification_recorded']``,
  exit status 3 on a mismatch or an error).
  """
  from flaxlegacy.upgrade import report as report_lib  # pylint: disable=g-import-not-at-top
  _check_names(names)
  files, others = [], []
  for src in srcs:
    if not os.path.exists(src):
      raise FileNotFoundError(f'flaxlegacy upgrade: no such file or '
                              f'directory: {src}')
  under = _src_names(srcs)
  for src in srcs:
    for root, rel, path in _walk(src):
      if src in under and os.path.isdir(src):
        rel = os.path.join(under[src], rel)
      sf = SourceFile(root, rel, path)
      (files if path.endswith('.py') else others).append(sf)
  if out is not None:
    out_abs = os.path.abspath(out)
    for src in srcs:
      s = os.path.abspath(src)
      if out_abs == s or out_abs.startswith(
          s.rstrip(os.sep) + os.sep) and os.path.isdir(s):
        raise ValueError(f'flaxlegacy upgrade: --out {out} lies inside SRC '
                         f'{src}; choose a directory outside it')
  with _fewer_collections():
    markers = _legacy_markers()
    for sf in files:
      with open(sf.path, encoding='utf-8') as fh:
        sf.code = fh.read()
      if sf.code.startswith(shipping.HEADER):
        sf.new_code = sf.code  # a helper copy an earlier upgrade wrote
      elif _may_need_rewrite(sf.code, markers):
        _parse(sf)
    _parse_importers(files)
    for sf in files:
      if sf.module is None and sf.error is None and sf.new_code is None:
        # nothing any rule looks for; still name a syntax error
        try:
          compile(sf.code, sf.path, 'exec', dont_inherit=True)
          sf.new_code = sf.code
        except SyntaxError as e:
          sf.error = f'{sf.path}:{e.lineno}:{e.offset}: syntax error: {e.msg}'
          sf.report.error = sf.error
    observed = None
    if observe:
      from flaxlegacy.upgrade import observe as observe_lib  # pylint: disable=g-import-not-at-top
      roots = [(src if os.path.isdir(src) else os.path.dirname(
          os.path.abspath(src)), under.get(src, '') if os.path.isdir(src)
                else '') for src in srcs]
      observed = observe_lib.run(observe, roots)
    codebase = _analyse(files, names, observed, _gin_configs(others))
    # installed dependencies that call removed JAX names (their imports get
    # a TODO)
    from flaxlegacy.upgrade import dependencies  # pylint: disable=g-import-not-at-top
    from flaxlegacy.upgrade.rules import jax_names  # pylint: disable=g-import-not-at-top
    codebase.stale_dependencies = dependencies.scan(
        files, codebase, dependencies.removed_names(jax_names))
    _transform_all(files, codebase)
    # the keys TODO where only the codebase says it is early linen
    from flaxlegacy.upgrade.rules import early_linen  # pylint: disable=g-import-not-at-top
    early_linen.keys_across_files(files, codebase)
    # the flaxlegacy helpers the tree uses, copied into it
    shipped = shipping.ship(files)
    added = [s for s in shipped if s.source_file is None]
    changed = [sf for sf in files if sf.new_code is not None
               and sf.new_code != sf.code]
    report = report_lib.build(files, codebase, shipped)
  status = 0
  if diff:
    for sf in changed:
      stdout.write(''.join(difflib.unified_diff(
          sf.code.splitlines(True), sf.new_code.splitlines(True),
          fromfile=sf.path, tofile=sf.path)))
    for s in added:
      stdout.write(''.join(difflib.unified_diff(
          [], s.code.splitlines(True), fromfile='/dev/null', tofile=s.path)))
    status = 1 if changed or added else 0
  elif in_place:
    for sf in changed:
      with open(sf.path, 'w', encoding='utf-8') as fh:
        fh.write(sf.new_code)
    for s in added:
      with open(s.path, 'w', encoding='utf-8') as fh:
        fh.write(s.code)
  elif out is not None:
    for sf in files + others:
      dst = os.path.join(out, sf.rel)
      os.makedirs(os.path.dirname(dst) or '.', exist_ok=True)
      if sf in files and sf.new_code is not None:
        with open(dst, 'w', encoding='utf-8') as fh:
          fh.write(sf.new_code)
      else:
        shutil.copy2(sf.path, dst)
    for s in added:
      dst = os.path.join(out, s.rel)
      os.makedirs(os.path.dirname(dst) or '.', exist_ok=True)
      with open(dst, 'w', encoding='utf-8') as fh:
        fh.write(s.code)
  if verify and not diff:
    from flaxlegacy.upgrade import verify as verify_lib  # pylint: disable=g-import-not-at-top
    root = out if out is not None else None
    results = verify_lib.verify_codebase(
        files, codebase, upgraded_root=root,
        rename_map=report.get('rename_map'))
    report['verification'] = results
    if any(r['status'] == 'mismatch' for r in results):
      status = status or 3
  if verify_with and out is not None and not diff:
    from flaxlegacy.upgrade import verify as verify_lib  # pylint: disable=g-import-not-at-top
    src = srcs[0] if os.path.isdir(srcs[0]) else os.path.dirname(
        os.path.abspath(srcs[0]))
    entries = verify_lib.record_and_verify(
        verify_with, src, out, report['modules'])
    report['verification_recorded'] = entries
    if any(e['status'] in ('mismatch', 'error') for e in entries):
      status = status or 3
  if out is not None and not diff:
    report_lib.write(report, os.path.join(out, 'upgrade.json'))
  if any(sf.error for sf in files) and status == 0:
    status = 0 if diff else status
  return status, report
