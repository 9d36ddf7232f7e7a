"""Runs every rule over one parsed file (the file-level transformer itself,
``Upgrader``, is rules/rewriter.py's).

Rules that are unsure leave the code as it was and attach
``# TODO(flaxlegacy upgrade): <why>`` to the enclosing statement (once: a
second run finds the comment and adds nothing).
"""

import re

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import walk
from flaxlegacy.upgrade.cst_util import add_defs  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.cst_util import add_imports  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.positions import LazyPositions
from flaxlegacy.upgrade.rules import jax_names
from flaxlegacy.upgrade.rules.rewriter import Upgrader  # pylint: disable=g-importing-member


class FileReport:

  def __init__(self):
    self.rewritten = []
    self.left = []
    self.error = None
    self.modules = []
    self.renames = []  # --names linen: one rename-map entry per class
    self.failed = None  # why the rules failed on the file (api.py)

  def as_dict(self):
    out = {'rewritten': self.rewritten, 'left': self.left,
           'modules': [m['class'] for m in self.modules],
           'error': self.error}
    if self.failed:
      out['failed'] = self.failed
    return out


class Context:
  """What every transformer of one file shares."""

  def __init__(self, file_facts, codebase, report, positions, code_of,
               target='linen'):
    self.facts = file_facts
    self.codebase = codebase
    self.report = report
    self.positions = positions
    self.code_of = code_of
    # what the module rules' plans are written as (upgrade/emit/)
    self.target = target
    self.needed_imports = set()  # 'functools', 'itertools', 'typing.Any'
    # name -> source of a small function the rewritten code calls, written
    # once into the file after its imports (rules/splat.py)
    self.needed_defs = {}
    # local -> (line, full name) of legacy randomness imported by name at
    # the top of the file, decided once it is rewritten
    # (rules/stochastic_names.py)
    self.stochastic_imports = {}
    self.line_offset = 0
    # id(statement a pass rebuilt) -> (it, the statement it was made from),
    # for the written line of a TODO a later pass raises in it
    # (cst_util.TodoComments)
    self.origins = {}
    # statement -> the '#' its text as written holds, or None: not known
    # (cst_util.StatementTexts.hashes; TodoComments reads it)
    self.hashes = None
    # positions in the file as written (LazyPositions), looked up first:
    # a node no pass replaced keeps its written line though lines were
    # added above it
    self.written = None
    # removed module -> what it becomes in this file (rules/early_linen/
    # removed_modules.py ``served_renames``)
    self.served = {}
    # id(node) -> (node, plan) of each submodule construction a module
    # rule wrote (a SubmoduleCall or Instance plan; the node as its
    # emitter wrote it, kept so the id stays its own):
    # rules/module_methods.py finds them in the written bodies
    self.constructions = {}
    # legacy module definitions -> linen classes (rules/modules.py); the
    # rewriters (rules/rewriter.py, rules/apply_rewriter.py) call them
    # back through here, as modules.py builds on them
    from flaxlegacy.upgrade.rules import modules  # pylint: disable=g-import-not-at-top
    self.convert_class = modules.convert_class
    self.convert_function = modules.convert_function
    from flaxlegacy.upgrade.rules import layer_functions  # pylint: disable=g-import-not-at-top
    self.convert_layer_function = layer_functions.convert_top_level

  def line(self, node):
    if self.written is not None:  # a node of the file as written: its line
      pos = self.written.get(node)
      if pos is not None:
        return pos.start.line
    pos = self.positions.get(node)
    return pos.start.line + self.line_offset if pos is not None else None


def _code_of(module):
  """``module.code_for_node``, faster (cst_util.code)."""
  return lambda node: cst_util.code(node, module)


def parse(code):
  return cst.parse_module(code)


_WORD = re.compile(r'\w+')


class _Relevance:
  """Whether a statement's text holds something some rule may rewrite:
  one of ``words`` as a whole word (``\\bw\\b``), or a match of
  ``pattern``.  A word of word characters only is a whole word of a text
  exactly when it is one of the text's maximal runs of word characters,
  so those are looked up in a set of the text's runs (speed: one regex
  alternative per word made the search a tenth of the transform's CPU);
  any other word stays in the regex."""

  def __init__(self, words, alternatives):
    self.words = frozenset(w for w in words if _WORD.fullmatch(w))
    alternatives = list(alternatives) + [
        r'\b' + re.escape(w) + r'\b' for w in sorted(words)
        if w not in self.words]
    self.pattern = re.compile('|'.join(alternatives)) if alternatives else None

  def search(self, text):
    if self.words and not self.words.isdisjoint(_WORD.findall(text)):
      return True
    return self.pattern is not None and bool(self.pattern.search(text))


def _relevance(file_facts, codebase):
  """A test (``.search(text)``) of statement text that some rule may
  rewrite."""
  from flaxlegacy.upgrade.rules import jax_names  # pylint: disable=g-import-not-at-top
  words = set()
  for q in list(jax_names.RENAMES) + list(jax_names.UNSURE) + list(
      jax_names.CALLS) + list(jax_names.MODULE_RENAMES):
    words.add(q.rsplit('.', 1)[-1])
  words.update(file_facts.modules)
  words.update(file_facts.partial_helpers)
  words.update(getattr(file_facts, 'partial_aliases', ()))  # X = nn.Y.partial
  for f in codebase.files.values():
    words.update(f.modules)
  words.update(p.split('.')[-1] for p in file_facts.nn_prefixes)
  # make_rng imported by name (rules/stochastic_names.py)
  words.update(getattr(file_facts, 'stochastic_names', ()))
  words.add('import')
  alternatives = [r'\.partial\b', r'\.shared\b', 'jax\\.config',
                  r'_by_shape\b']
  removed = jax_names.removed_name_pattern(file_facts.imports)
  if removed:
    alternatives.append(removed)
  return _Relevance(words, alternatives)


def prepare(codebase):
  """Works out now the codebase-wide analyses the rules otherwise have
  worked out at their first use (``codebase.analyses``, analyses/: what
  the code does with nn.Model values, the auto-name stack), so that forked
  workers (api.py) inherit them instead of each working them out again.
  The rule modules too: each worker would import them again (tens of
  milliseconds each)."""
  # pylint: disable=g-import-not-at-top,unused-import
  from flaxlegacy.upgrade.rules import array_keys
  from flaxlegacy.upgrade.rules import early_linen
  from flaxlegacy.upgrade.rules import layer_functions
  from flaxlegacy.upgrade.rules import modules
  from flaxlegacy.upgrade.rules import programs
  from flaxlegacy.upgrade.rules import test_util
  from flaxlegacy.upgrade.rules import value_initializers
  from flaxlegacy.upgrade.rules.early_linen import removed_modules
  from flaxlegacy.upgrade.rules import autoname_stack
  # pylint: enable=g-import-not-at-top,unused-import
  codebase.analyses.model_uses()
  # the auto-name stack's analysis walks every file's calls (each worker
  # walked them all again on its first module class)
  codebase.analyses.autoname_stack()
  walk.warm()


def upgrade_module(path, module, codebase, report, statement_texts=None,
                   code=None, start_lines=None, spans=None):
  """Rewrites one parsed file; returns the new source.

  ``code``: the source ``module`` was parsed from, if the caller has it
  (saves generating it again while the module is unchanged).
  ``start_lines``: ``positions.start_lines(module)``, if the caller has it
  (api.py works it out with the statement texts); ``spans``: the lines of
  its inner statements in ``code`` (positions.code_statements_and_lines),
  if the caller has them.

  Only top-level statements whose text matches ``_relevance`` are walked;
  positions (for the report's line numbers) are resolved per walked
  statement.
  """
  file_facts = codebase.files[path]
  if statement_texts is None:
    code, statement_texts = cst_util.code_and_statements(module)
  # the text of each statement object seen so far: a pass that changes a
  # file keeps the statements it does not change (walk.FastTransformer),
  # whose text is then known
  known = cst_util.StatementTexts(module, statement_texts, spans,
                                  code if spans else None)
  # where each statement of the file as written starts: the report's lines
  # are the written file's, also after the program pass added imports
  written = {}
  line = 1 + sum(1 for _ in module.header)
  for stmt, text in zip(module.body, statement_texts):
    written[id(stmt)] = line
    line += text.count('\n')

  texts_of = known.of

  # Program-level rules first (rules/programs.py), on the legacy
  # source, then the module rules on the result.
  from flaxlegacy.upgrade.rules import programs  # pylint: disable=g-import-not-at-top
  written_positions = LazyPositions(module, start_lines)
  # statements a pass rebuilt -> what they were made from, across passes
  origins = {}
  if programs.relevant(file_facts, codebase, path):
    pctx = Context(file_facts, codebase, report, written_positions,
                   _code_of(module))
    pctx.origins = origins
    pctx.hashes = known.hashes
    try:
      new_module = programs.run(pctx, module)
    except Exception as e:  # pylint: disable=broad-except
      # A program-level construct the pass does not know: the module rules
      # still run; the report says what was not rewritten.
      report.left.append({'line': None, 'why': 'program-level rules failed '
                          f'on this file ({type(e).__name__}: '
                          f'{str(e).splitlines()[0] if str(e) else ""}); '
                          'program code left as it was'})
      new_module = module
    if new_module is not module and not new_module.deep_equals(module):
      module, code = new_module, None
      statement_texts = texts_of(module)
  # (the two passes below search the text; ``code`` is only ever the exact
  # source of ``module``)
  from flaxlegacy.upgrade.rules import array_keys  # pylint: disable=g-import-not-at-top
  new_module = array_keys.run(file_facts, report, module,
                              ''.join(statement_texts))
  if new_module is not module:
    module, code = new_module, None
    statement_texts = texts_of(module)
  from flaxlegacy.upgrade.rules import value_initializers  # pylint: disable=g-import-not-at-top
  new_module = value_initializers.run(report, module, ''.join(statement_texts))
  if new_module is not module:
    module, code = new_module, None
    statement_texts = texts_of(module)
  ctx = Context(file_facts, codebase, report, {}, _code_of(module))
  ctx.written = written_positions
  ctx.hashes = known.hashes
  ctx.origins = origins
  upgrader = Upgrader(ctx)
  from flaxlegacy.upgrade.rules.early_linen import removed_modules  # pylint: disable=g-import-not-at-top
  if any(m.rsplit('.', 1)[-1] in t for t in statement_texts
         for m in removed_modules.STAND_INS):
    ctx.served = removed_modules.served_renames(''.join(statement_texts),
                                                file_facts.imports)
  relevant = _relevance(file_facts, codebase)
  line = 1 + sum(1 for _ in module.header)
  shift = 0  # lines added above, as of the last statement as written
  body = []
  changed = False
  for stmt, text in zip(module.body, statement_texts):
    if id(stmt) in written:
      shift = line - written[id(stmt)]
    if relevant.search(text):
      ctx.positions = LazyPositions(cst.Module(body=[stmt]))
      ctx.line_offset = line - shift - 1
      new = upgrader.walk(stmt)
      changed = changed or new is not stmt
      body.append(new)
    else:
      body.append(stmt)
    line += text.count('\n')
  new = module.with_changes(body=body) if changed else module
  from flaxlegacy.upgrade.rules import stochastic_names  # pylint: disable=g-import-not-at-top
  new = stochastic_names.finish(ctx, new)
  if ctx.needed_imports:
    new = add_imports(new, ctx.needed_imports)
  if ctx.needed_defs:
    new = add_defs(new, ctx.needed_defs)
  # Removed jax.test_util helpers in test files (rules/test_util.py).
  from flaxlegacy.upgrade.rules import test_util  # pylint: disable=g-import-not-at-top
  new = test_util.run(ctx, new)
  # Early linen (flax 0.3.x) last: its rules read the imports as written
  # (names of legacy flax.nn are never theirs) and may add lines, which
  # would shift the line numbers the rules above report.
  from flaxlegacy.upgrade.rules import early_linen  # pylint: disable=g-import-not-at-top
  code = code if new is module and code is not None else known.code(new)
  out = early_linen.run(file_facts, report, new, code,
                        written=written_positions, known=known)
  return code if out is new else known.code(out)
