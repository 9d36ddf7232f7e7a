"""Layer 1 of the upgrade: libcst helpers that every other layer shares.

The upgrade's modules import each other in layers, without circles (counting
imports inside functions too; tests/test_upgrade_layers.py checks it):

1. leaves: this module, walk.py, positions.py, gin_bindings.py,
   layer_table.py (the legacy layer table), plans.py (what a module rule
   decided, in terms no target spells) and the emitters that write plans
   as a target's code (emit/: linen today);
2. facts: the fact collectors (collectors/), facts.py, flow.py (its parts
   in flow_facts/), the codebase-wide analyses of them (analyses/, kept
   in ``codebase.analyses``);
3. rules (rules/): read the facts (and store nothing on them), and import
   each other downwards only;
4. drivers: transform.py, api.py, report.py, verify.py, cli.py.

What lives here: names of nodes (``dotted``, ``legacy_attr``), the TODO
comments every rule writes (``TODO_PREFIX``, ``TodoComments``,
``add_todos``), adding imports / definitions to a module, and small
argument-list builders.
"""

import bisect
import collections
import dataclasses
import keyword
import re

import libcst as cst
from libcst._nodes.internal import CodegenState  # pylint: disable=protected-access
from libcst.helpers import get_full_name_for_node

from flaxlegacy.upgrade import walk

LEGACY_NN_MODULES = ('flax.nn', 'flax.deprecated.nn')
TODO_PREFIX = '# TODO(flaxlegacy upgrade): '


def dotted(node):
  """libcst's ``get_full_name_for_node`` (``a.b.c``; None where it has
  none), with names and attribute chains worked out here: most of what
  the facts ask, and libcst's is a chain of ``isinstance`` calls per dot."""
  t = type(node)
  if t is cst.Name:
    return node.value
  if t is cst.Attribute:
    parts = [node.attr.value]
    value = node.value
    while type(value) is cst.Attribute:
      parts.append(value.attr.value)
      value = value.value
    # (what libcst writes for any head, ``None`` too: ``f"{head}.x"``)
    parts.append(value.value if type(value) is cst.Name else
                 str(_full_name(value)))
    return '.'.join(reversed(parts))
  return _full_name(node)


def _full_name(node):
  t = type(node)
  if t is cst.Call:  # libcst's answer for a call: its function's
    return dotted(node.func)
  if t is cst.Subscript:  # and for a subscript: its value's
    return dotted(node.value)
  try:
    return get_full_name_for_node(node)
  except Exception:  # pylint: disable=broad-except
    return None


# what legacy ``flax.nn`` re-exported from ``flax.nn.base`` (``nn.base.X``
# is ``nn.X``); ``base.Module`` is left to the class rules, which name it
BASE_REEXPORTS = frozenset(('Model', 'Collection', 'capture_module_outputs',
                            'module', 'stateful', 'get_state',
                            'module_method', 'stochastic'))
# what legacy ``flax.nn`` re-exported from its other submodules: each
# ``nn.<submodule>.X`` here is ``nn.X`` (legacy-surface: the names of both
# modules); ``Module`` is left to the class rules, which name it
SUBMODULE_REEXPORTS = {
    'base': BASE_REEXPORTS,
    'activation': frozenset((
        'celu', 'elu', 'gelu', 'glu', 'leaky_relu', 'log_sigmoid',
        'log_softmax', 'relu', 'sigmoid', 'silu', 'soft_sign', 'softmax',
        'softplus', 'swish', 'tanh')),
    'attention': frozenset((
        'MultiHeadDotProductAttention', 'SelfAttention',
        'dot_product_attention', 'DenseGeneral', 'Collection', 'make_rng',
        'softmax')),
    'linear': frozenset(('Conv', 'ConvTranspose', 'Dense', 'DenseGeneral',
                         'Embed')),
    'normalization': frozenset(('BatchNorm', 'GroupNorm', 'LayerNorm')),
    'pooling': frozenset(('avg_pool', 'max_pool')),
    'recurrent': frozenset(('ConvLSTM', 'GRUCell', 'LSTMCell',
                            'OptimizedLSTMCell')),
    'stochastic': frozenset(('dropout', 'is_stochastic', 'make_rng',
                             'stochastic')),
}


def legacy_attr(node, prefixes):
  """'Dense' for ``nn.Dense`` when ``nn`` is a legacy prefix, else None."""
  # (by node class: asked of most names and calls of a codebase, and
  # libcst's classes are ABCs, whose isinstance is a slow call when it
  # fails)
  if type(node) is not cst.Attribute:
    return None  # a name has no dot after a prefix; a call is no name
  inner = node.value
  while type(inner) is cst.Attribute:
    inner = inner.value
  if type(inner) is not cst.Name:
    return None  # nn.Conv(...).sum: an attribute of a value, not of nn
  return _prefixed(dotted(node), prefixes)


def legacy_nn_attr(full):
  """``legacy_attr`` of a full dotted name: ``'Dense'`` for
  ``flax.nn.linear.Dense`` or ``flax.deprecated.nn.Dense``,
  ``'attention.make_padding_mask'``, else None."""
  return _prefixed(full, LEGACY_NN_MODULES)


def _prefixed(name, prefixes):
  """``legacy_attr`` of the dotted ``name`` of an attribute chain on a
  name."""
  for p in prefixes:
    if name.startswith(p + '.'):
      attr = name[len(p) + 1:]
      head, _, rest = attr.partition('.')
      if rest in SUBMODULE_REEXPORTS.get(head, ()):
        return rest  # nn.base.Model is nn.Model, nn.linear.Dense nn.Dense
      return attr
  return None


_STATEMENT_CLASSES = {}  # node class -> whether it is a cst.BaseStatement


def is_statement(node):
  """``isinstance(node, cst.BaseStatement)``, answered once per node class
  (libcst's node classes are ABCs: ``isinstance`` is a slow call, and the
  transformers ask it of every node)."""
  t = type(node)
  out = _STATEMENT_CLASSES.get(t)
  if out is None:
    out = _STATEMENT_CLASSES[t] = issubclass(t, cst.BaseStatement)
  return out


class TodoComments:
  """``todo(node, why)`` for a libcst transformer: a line in the report and
  a ``# TODO(flaxlegacy upgrade): why`` comment above the statement holding
  ``node``.

  One list of TODOs per open statement (``self._todos``, set up by the
  class).  A TODO raised while leaving a statement belongs to it; a
  statement replaced by several puts them on the first; one removed hands
  them to the enclosing statement, so no TODO is lost.  The user's
  comments are not lost either: a simple statement a rule changed gets
  back, above it, each comment it no longer holds (``keep_comments``).
  """

  def _line_of(self, node):
    return self.ctx.line(node)

  def todo(self, node, why):
    if self._todos and why not in self._todos[-1]:
      self._todos[-1].append(why)
    self.ctx.report.left.append({'line': self._todo_line(node), 'why': why})

  def _todo_line(self, node):
    """The written line of ``node``; where an earlier pass rebuilt it (no
    position), that of the innermost open statement that has one, or
    that an earlier pass rebuilt from one (``ctx.origins``)."""
    line = self._line_of(node)
    if line is not None:
      return line
    origins = getattr(getattr(self, 'ctx', None), 'origins', None) or {}
    for stmt in reversed(self.__dict__.get('_open_statements', ())):
      line = self._line_of(stmt)
      if line is None:
        origin = origins.get(id(stmt))
        if origin is not None and origin[0] is stmt:
          line = self._line_of(origin[1])
      if line is not None:
        return line
    return None

  # (walk.FastTransformer calls enter_statement / leave_statement and the
  # hooks itself, without the two methods below)
  STATEMENT_WRAPPER = True

  def on_visit(self, node):
    if is_statement(node) and self.enter_statement(node) is False:
      super().on_visit(node)  # (its visit hook is still called)
      return False
    return super().on_visit(node)

  def on_leave(self, original_node, updated_node):
    updated = super().on_leave(original_node, updated_node)
    if not is_statement(original_node):
      return updated
    return self.leave_statement(original_node, updated)

  def enter_statement(self, node):  # pylint: disable=unused-argument
    """Before the statement's visit hook; False: its children are not
    walked (the visit hook is called all the same)."""
    self._todos.append([])
    self.__dict__.setdefault('_open_statements', []).append(node)

  def leave_statement(self, original_node, updated):
    self._open_statements.pop()
    updated = self._leave_statement(original_node, updated)
    # a later pass over the rebuilt statement reports its written line
    record_origin(getattr(getattr(self, 'ctx', None), 'origins', None),
                  original_node, updated)
    return updated

  def _leave_statement(self, original_node, updated):
    todos = self._todos.pop()
    if updated is not original_node and isinstance(
        original_node, cst.SimpleStatementLine):
      # (the file's statement texts, where known, say which have none)
      hashes = getattr(getattr(self, 'ctx', None), 'hashes', None)
      if not _kept_as_is(original_node, updated,
                         None if hashes is None else hashes(original_node)):
        updated = keep_comments(original_node, updated)
    if not todos:
      return updated
    if isinstance(updated, cst.BaseStatement):
      return add_todos(updated, todos)
    if isinstance(updated, cst.FlattenSentinel) and updated.nodes:
      nodes = list(updated.nodes)
      nodes[0] = add_todos(nodes[0], todos)
      return cst.FlattenSentinel(nodes)
    if self._todos:  # removed: the enclosing statement carries them
      self._todos[-1].extend(t for t in todos if t not in self._todos[-1])
    return updated


def record_origin(origins, original, updated):
  """Notes in ``origins`` (``ctx.origins``: id -> (statement, the node as
  written it was made from: a statement, or a field's parameter)) that a
  pass made the statement ``updated`` of ``original``, so that a TODO a
  later pass raises in it has its written line (TodoComments)."""
  if (origins is None or updated is original
      or not isinstance(updated, cst.BaseStatement)):
    return
  first = origins.get(id(original))
  origins[id(updated)] = (updated, first[1] if first is not None
                          and first[0] is original else original)


class _Comments(walk.FastVisitor):
  """The comments in a tree, in order (the whitespace walked too)."""

  def __init__(self):
    super().__init__()
    self.out = []

  def visit_Comment(self, node):
    self.out.append(node.value)


def comments(node):
  """The comments written in ``node``, in order."""
  found = _Comments()
  node.visit(found)
  return found.out


def _kept_as_is(original, updated, hashes):
  """Whether every comment of the simple statement ``original`` is
  certainly in ``updated`` without a walk: ``hashes`` (the ``#`` in its
  text as written, or None) is 0, or counts only the comments of its own
  lines above and at its end, which ``updated`` keeps."""
  if hashes is None:
    return False
  if hashes == 0:
    return True
  if not isinstance(updated, cst.SimpleStatementLine) or (
      updated.leading_lines is not original.leading_lines
      or updated.trailing_whitespace is not original.trailing_whitespace):
    return False
  own = sum(1 for l in original.leading_lines if l.comment is not None)
  if original.trailing_whitespace.comment is not None:
    own += 1
  return own == hashes


def keep_comments(original, updated):
  """``updated`` (what a rule made of the simple statement ``original``)
  with each comment of ``original`` that it no longer holds put back as
  a comment line above it: a comment inside a rewritten call (``rate=0.1,
  # why``) is the user's text, and a rewrite built from a plan keeps the
  values, not the layout around them.  A statement removed keeps none."""
  before = comments(original)
  if not before:
    return updated
  first = updated
  if isinstance(updated, cst.FlattenSentinel):
    if not updated.nodes:
      return updated
    first = updated.nodes[0]
    after = [c for n in updated.nodes for c in comments(n)]
  elif isinstance(updated, cst.BaseStatement):
    after = comments(updated)
  else:
    return updated
  have = collections.Counter(after)
  lost = []
  for c in before:
    if have[c]:
      have[c] -= 1
    else:
      lost.append(c)
  if not lost:
    return updated
  lines = list(first.leading_lines) + [
      cst.EmptyLine(indent=True, comment=cst.Comment(c)) for c in lost]
  first = first.with_changes(leading_lines=lines)
  if first is updated or not isinstance(updated, cst.FlattenSentinel):
    return first
  return cst.FlattenSentinel([first] + list(updated.nodes[1:]))


def add_todos(stmt, todos):
  lines = list(stmt.leading_lines)
  existing = {l.comment.value for l in lines if l.comment is not None}
  indent = True
  for why in todos:
    text = TODO_PREFIX + why.replace('\n', ' ')
    if text not in existing:
      lines.append(cst.EmptyLine(indent=indent, comment=cst.Comment(text)))
  return stmt.with_changes(leading_lines=lines)


def add_imports(module, needed):
  """Adds ``import functools`` etc. after the last top-level import that
  comes before any class or function definition (the new names are used
  by the definitions)."""
  have = set()
  last = -1
  defined = False
  for i, stmt in enumerate(module.body):
    defined = defined or isinstance(stmt, (cst.ClassDef, cst.FunctionDef))
    if isinstance(stmt, cst.SimpleStatementLine):
      for s in stmt.body:
        if isinstance(s, cst.Import):
          last = i if not defined else last
          for a in s.names:
            have.add(dotted(a.name))
        elif isinstance(s, cst.ImportFrom):
          last = i if not defined else last
          if s.module is not None and not isinstance(s.names, cst.ImportStar):
            for a in s.names:
              # ``from m import x as y`` binds y, not x: ``m.x`` is still
              # needed where the rewrite spells x
              if not a.asname or a.asname.name.value == dotted(a.name):
                have.add(f'{dotted(s.module)}.{dotted(a.name)}')
              if a.asname:
                have.add(f'{dotted(s.module)}.{dotted(a.name)} as '
                         f'{a.asname.name.value}')
  new = []
  for name in sorted(needed):
    if name in have:
      continue
    if name.startswith('import '):  # a module by its own dotted name
      if name[len('import '):] not in have:
        new.append(cst.parse_statement(name + '\n'))
      continue
    if name.startswith('from '):  # a whole line (``from m import x as y``)
      stmt = cst.parse_statement(name + '\n')
      imp = stmt.body[0]
      if not all(f'{dotted(imp.module)}.{dotted(a.name)}' + (
          f' as {a.asname.name.value}' if a.asname else '') in have
                 for a in imp.names):
        new.append(stmt)
      continue
    if '.' in name:
      mod, _, attr = name.rpartition('.')
      new.append(cst.parse_statement(f'from {mod} import {attr}\n'))
    else:
      new.append(cst.parse_statement(f'import {name}\n'))
  if not new:
    return module
  body = list(module.body)
  if last < 0:
    # after a module docstring, if any
    last = 0 if body and is_docstring(body[0]) else -1
  body[last + 1:last + 1] = new
  return module.with_changes(body=body)


def _import_block_end(module):
  """Index of the last top-level import before any definition, or -1."""
  last = -1
  for i, stmt in enumerate(module.body):
    if isinstance(stmt, (cst.ClassDef, cst.FunctionDef)):
      break
    if isinstance(stmt, cst.SimpleStatementLine) and any(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body):
      last = i
  return last


def add_defs(module, needed):
  """Writes the functions ``needed`` (name -> source) that the file does
  not define yet, after its imports."""
  have = {s.name.value for s in module.body if isinstance(s, cst.FunctionDef)}
  new = []
  for name in sorted(needed):
    if name in have:
      continue
    fn = cst.parse_statement(needed[name])
    new.append(fn.with_changes(leading_lines=[cst.EmptyLine(indent=False)] * 2))
  if not new:
    return module
  body = list(module.body)
  at = _import_block_end(module)
  if at < 0:
    at = 0 if body and is_docstring(body[0]) else -1
  body[at + 1:at + 1] = new
  return module.with_changes(body=body)


def is_docstring(stmt):
  """Whether a statement is a docstring (a lone string expression)."""
  return (isinstance(stmt, cst.SimpleStatementLine) and stmt.body
          and isinstance(stmt.body[0], cst.Expr)
          and isinstance(stmt.body[0].value, (cst.SimpleString,
                                              cst.ConcatenatedString)))


_DOTTED_SRC = re.compile(r'[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\Z')
_NAME_WORDS = frozenset(('None', 'True', 'False'))  # keywords libcst reads as names


def expr(src):
  """The expression node of ``src`` (``cst.parse_expression(src)``).

  A dotted name (``functools.partial``, ``nn.compact``: most of what the
  emitter writes this way) is built from its parts, the tree the parser
  makes (tests/test_upgrade_fast_paths.py), without the parser's fixed
  cost (about a tenth of a millisecond a call, a thousand calls a run)."""
  if _DOTTED_SRC.match(src):
    parts = src.split('.')
    if not any(keyword.iskeyword(p) and p not in _NAME_WORDS for p in parts):
      node = cst.Name(parts[0])
      for part in parts[1:]:
        node = cst.Attribute(value=node, attr=cst.Name(part))
      return node
  return cst.parse_expression(src)


def arg(value, keyword=None):
  """An argument ``value`` or ``keyword=value`` (no spaces around =)."""
  if keyword is None:
    return cst.Arg(value=value)
  return cst.Arg(value=value, keyword=cst.Name(keyword),
                 equal=cst.AssignEqual(
                     whitespace_before=cst.SimpleWhitespace(''),
                     whitespace_after=cst.SimpleWhitespace('')))


def _commented(comma):
  """Whether a Comma carries a comment (``x,  # why`` before a line
  break): the user's text, which a rewrite must not drop."""
  if not isinstance(comma, cst.Comma):
    return False
  ws = comma.whitespace_after
  if not isinstance(ws, cst.ParenthesizedWhitespace):
    return False
  return ws.first_line.comment is not None or any(
      l.comment is not None for l in ws.empty_lines)


def all_params(params):
  """Every Param of a ``cst.Parameters``, in order: positional-only,
  positional, keyword-only, then ``*args`` and ``**kwargs``."""
  out = (list(params.posonly_params) + list(params.params)
         + list(params.kwonly_params))
  out += [p for p in (params.star_arg, params.star_kwarg)
          if isinstance(p, cst.Param)]
  return out


def without_comma(node):
  """``node`` (an Arg, Param, Element ...) with no comma after it, unless
  its comma carries a comment (the user's text: kept, see clean_args)."""
  if _commented(node.comma):
    return node
  return node.with_changes(comma=cst.MaybeSentinel.DEFAULT)


def clean_args(args):
  """Fixes trailing commas after args were moved around (commas that are
  there keep their spacing; ``clean`` rewrites them all).  The last
  argument keeps a trailing comma that carries a comment (``k=v,  # why``
  then the closing parenthesis on its own line): the comment is the
  user's."""
  args = list(args)
  out = []
  for i, a in enumerate(args):
    if i < len(args) - 1:
      if a.comma is cst.MaybeSentinel.DEFAULT or a.comma is None:
        a = a.with_changes(comma=cst.Comma(
            whitespace_after=cst.SimpleWhitespace(' ')))
    elif not _commented(a.comma):
      a = a.with_changes(comma=cst.MaybeSentinel.DEFAULT)
    out.append(a)
  return out


def kw(a):
  """An argument's keyword, or None."""
  return a.keyword.value if a.keyword is not None else None


def clean(args):
  """Commas between args (or list / dict items), none after the last;
  a comma that carries a comment is kept as it is (see clean_args)."""
  args = list(args)
  out = []
  for i, a in enumerate(args):
    if _commented(a.comma):
      pass
    elif i < len(args) - 1:
      a = a.with_changes(comma=cst.Comma(
          whitespace_after=cst.SimpleWhitespace(' ')))
    else:
      a = a.with_changes(comma=cst.MaybeSentinel.DEFAULT)
    out.append(a)
  return out


def add_import_lines(module, statements, bound):
  """Adds import statements (source lines) after the last top-level import,
  skipping those whose local name the file already binds."""
  new = []
  for src in sorted(statements):
    local = src.split()[-1] if ' as ' in src else src.split()[-1].split('.')[0]
    if local in bound:
      continue
    new.append(cst.parse_statement(src + '\n'))
  if not new:
    return module
  body = list(module.body)
  last = -1
  for i, stmt in enumerate(body):
    if isinstance(stmt, cst.SimpleStatementLine) and any(
        isinstance(x, (cst.Import, cst.ImportFrom)) for x in stmt.body):
      last = i
  if last < 0:
    last = 0 if body and is_docstring(body[0]) else -1
  body[last + 1:last + 1] = new
  return module.with_changes(body=body)


class _NoPosition:
  """``record_syntactic_position`` that records nothing, without the
  generator context manager libcst's plain codegen enters per node."""

  __slots__ = ()

  def __enter__(self):
    return None

  def __exit__(self, *exc):
    return False


_NO_POSITION = _NoPosition()


class _CodeState(CodegenState):
  """libcst's plain codegen state, minus its per-node no-op generator:
  the same tokens, about a third less time (tests/test_upgrade_walk.py)."""

  def record_syntactic_position(self, node, *, start_node=None,
                                end_node=None):  # pylint: disable=unused-argument
    return _NO_POSITION


def code(node, module=None):
  """``module.code_for_node(node)`` (``module.code`` for a module), the
  same text, faster.  ``module`` gives the indentation and newline (a
  default module's where None)."""
  m = module if module is not None else (
      node if isinstance(node, cst.Module) else _DEFAULT_MODULE)
  state = _CodeState(default_indent=m.default_indent,
                     default_newline=m.default_newline)
  node._codegen(state)  # pylint: disable=protected-access
  return ''.join(state.tokens)


_DEFAULT_MODULE = cst.Module(body=[])


def code_and_statements(module):
  """``(module.code, [module.code_for_node(s) for s in module.body])`` in
  one code generation instead of two: each top-level statement's text is
  its slice of the module's tokens (tests/test_upgrade_walk.py checks it
  against libcst's own)."""
  state = _CodeState(default_indent=module.default_indent,
                       default_newline=module.default_newline)
  for line in module.header:
    line._codegen(state)  # pylint: disable=protected-access
  texts = []
  for stmt in module.body:
    start = len(state.tokens)
    stmt._codegen(state)  # pylint: disable=protected-access
    texts.append(''.join(state.tokens[start:]))
  for line in module.footer:
    line._codegen(state)  # pylint: disable=protected-access
  if module.has_trailing_newline:
    if not state.tokens:
      state.add_token(state.default_newline)
  else:
    state.pop_trailing_newline()
  return ''.join(state.tokens), texts


@dataclasses.dataclass(frozen=True)
class _Written(cst.BaseStatement):
  """Stands, in a copy of a changed statement made for its code generation
  only (``StatementTexts``), for a statement of one of its blocks whose
  text is known: that text where the indentation is the one it was
  written at, else the statement's own code generation."""

  original: cst.BaseStatement
  text: str
  indent: tuple

  def _visit_and_replace_children(self, visitor):
    return self

  def _codegen_impl(self, state):
    if tuple(state.indent_tokens) == self.indent:
      state.add_token(self.text)
    else:
      self.original._codegen(state)  # pylint: disable=protected-access


# the fields of a compound statement, or of its clauses, that can hold
# blocks of statements (an if's elif / else, a try's handlers ...)
_CLAUSE_FIELDS = ('body', 'orelse', 'handlers', 'finalbody', 'cases')


def _with_written(node, known):
  """``node`` (a compound statement or a clause of one) with the
  statements of its blocks whose text ``known(stmt)`` gives (``(text,
  indent)`` or None) stood for by a ``_Written``; ``node`` itself where
  none is known."""
  if type(node) is cst.SimpleStatementLine:
    return node  # (no block inside)
  changes = {}
  for field in _CLAUSE_FIELDS:
    value = getattr(node, field, None)
    if value is None or isinstance(value, (str, cst.MaybeSentinel,
                                           cst.SimpleStatementSuite)):
      continue
    if isinstance(value, cst.IndentedBlock):
      body, changed = [], False
      for stmt in value.body:
        found = known(stmt)
        if found is not None:
          body.append(_Written(stmt, found[0], found[1]))
          changed = True
        else:
          new = _with_written(stmt, known)
          changed = changed or new is not stmt
          body.append(new)
      if changed:
        changes[field] = value.with_changes(body=body)
    elif isinstance(value, cst.CSTNode):
      new = _with_written(value, known)
      if new is not value:
        changes[field] = new
    elif isinstance(value, (tuple, list)):
      new = [_with_written(v, known) if isinstance(v, cst.CSTNode) else v
             for v in value]
      if any(a is not b for a, b in zip(new, value)):
        changes[field] = new
  return node.with_changes(**changes) if changes else node


_NEWLINE = re.compile(r'\r\n?|\n')


def _lines_of(text):
  """The lines of ``text``, each with its newline (libcst's newlines)."""
  out, start = [], 0
  for m in _NEWLINE.finditer(text):
    out.append(text[start:m.end()])
    start = m.end()
  if start < len(text):
    out.append(text[start:])
  return out


class StatementTexts:
  """The source of top-level statements already generated, by statement
  object (each kept alive with its text, so that an ``id`` is never taken
  for another's): a pass that changes a file keeps the statements it does
  not change (walk.FastTransformer), whose text need not be generated
  again.  A changed statement keeps most of its inner statements too:
  with ``spans`` (positions.code_statements_and_lines's, of the module
  whose code is ``code``) the text of each of those as written is a slice
  of ``code``, used where the indentation is the one it was written at
  (speed: a changed line in a long function generated the whole function,
  after the program pass and again at the end; the same text,
  tests/test_upgrade_fast_paths.py)."""

  def __init__(self, module=None, texts=None, spans=None, code=None):
    self._texts = {}  # id(stmt) -> (stmt, its text)
    if module is not None:
      for stmt, text in zip(module.body, texts):
        self._texts[id(stmt)] = (stmt, text)
    self._spans = spans if code is not None else None
    self._code = code
    self._lines = None
    # (line, its count of '#') of each line of ``code`` holding one
    # (1-based), worked out at the first ``hashes``
    self._hash_lines = None

  def _written(self, stmt):
    """(text, indentation) of ``stmt`` as written, or None."""
    span = self._spans.get(id(stmt))
    if span is None or span[0] is not stmt:
      return None
    if self._lines is None:
      self._lines = _lines_of(self._code)
    text = ''.join(self._lines[span[1] - 1:span[2] - 1])
    if not text.endswith(('\n', '\r')):  # (the file's last line, no newline)
      return None
    return text, span[3]

  def _text(self, stmt, module):
    entry = self._texts.get(id(stmt))
    if entry is not None and entry[0] is stmt:
      return entry[1]
    node = stmt
    if self._spans:
      node = _with_written(stmt, self._written)
    text = code(node, module)
    self._texts[id(stmt)] = (stmt, text)
    return text

  def hashes(self, stmt):
    """How many ``#`` the text of ``stmt`` as written holds (a top-level
    statement's text, or the lines of an inner one): 0, it has no comment;
    or None where its text is not known (speed: cst_util.keep_comments
    walks only statements that may hold a comment)."""
    entry = self._texts.get(id(stmt))
    if entry is not None and entry[0] is stmt:
      return entry[1].count('#')
    span = self._spans.get(id(stmt)) if self._spans else None
    if span is None or span[0] is not stmt:
      return None
    if self._hash_lines is None:
      if self._lines is None:
        self._lines = _lines_of(self._code)
      self._hash_lines = [(i, l.count('#'))
                          for i, l in enumerate(self._lines, 1) if '#' in l]
    i = bisect.bisect_left(self._hash_lines, (span[1], 0))
    n = 0
    while i < len(self._hash_lines) and self._hash_lines[i][0] < span[2]:
      n += self._hash_lines[i][1]
      i += 1
    return n

  def of(self, module):
    """``[module.code_for_node(s) for s in module.body]``."""
    return [self._text(s, module) for s in module.body]

  def code(self, module):
    """``module.code``, from the texts of its statements (``code``'s
    where the module ends without a newline)."""
    if not module.has_trailing_newline or not module.body:
      return code(module)
    state = _CodeState(default_indent=module.default_indent,
                       default_newline=module.default_newline)
    for line in module.header:
      line._codegen(state)  # pylint: disable=protected-access
    for stmt in module.body:
      state.tokens.append(self._text(stmt, module))
    for line in module.footer:
      line._codegen(state)  # pylint: disable=protected-access
    return ''.join(state.tokens)
