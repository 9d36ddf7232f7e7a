"""Start lines of a libcst tree's nodes, for the report's line numbers.

libcst's ``PositionProvider`` records a start and an end (line and
column, two objects each) for every node, through a generator context
manager per syntactic node: about ten times a plain codegen.  The rules
only ever read ``pos.start.line``, so this codegen state keeps just that
number, by the same rules as ``PositionProvider`` (a node's syntactic
start where its codegen records one, hoisted from ``start_node`` where
given; else where its whitespace starts).  ``LazyPositions`` works the
map out at the first look-up: most walks report nothing.
tests/test_upgrade_positions.py checks it against ``PositionProvider``.
"""

import re

from libcst._nodes.internal import CodegenState  # pylint: disable=protected-access

_NEWLINE = re.compile(r'\r\n?|\n')


class _Syntactic:
  """``record_syntactic_position`` without a generator."""

  __slots__ = ('state', 'node', 'start_node', 'line')

  def __init__(self, state, node, start_node):
    self.state = state
    self.node = node
    self.start_node = start_node
    self.line = state.line

  def __enter__(self):
    return None

  def __exit__(self, *exc):
    lines = self.state.lines
    lines[id(self.node)] = (lines[id(self.start_node)]
                            if self.start_node is not None else self.line)
    return False


class _LineState(CodegenState):
  """A codegen state that counts lines and records each node's start
  (keyed by ``id``: libcst's ``__hash__`` is a Python call).  It keeps no
  tokens: only the line count is read."""

  def __init__(self, default_indent, default_newline):
    super().__init__(default_indent=default_indent,
                     default_newline=default_newline)
    self.line = 1
    self.lines = {}

  def add_indent_tokens(self):
    pass  # indentation holds no newline

  def add_token(self, value):
    if '\r' in value:
      self.line += len(_NEWLINE.findall(value))
    elif '\n' in value:
      self.line += value.count('\n')

  def pop_trailing_newline(self):
    pass  # the file's end: no node starts after it

  def before_codegen(self, node):
    # where its whitespace starts; a syntactic start recorded inside its
    # codegen (``_Syntactic.__exit__``, later) replaces it
    self.lines[id(node)] = self.line

  def after_codegen(self, node):
    pass

  def record_syntactic_position(self, node, *, start_node=None,
                                end_node=None):  # pylint: disable=unused-argument
    return _Syntactic(self, node, start_node)


def start_lines(module):
  """{id(node): its start line (1-based)} for every node of ``module``."""
  state = _LineState(module.default_indent, module.default_newline)
  module._codegen(state)  # pylint: disable=protected-access
  return state.lines


class _TextLineState(_LineState):
  """``_LineState`` that keeps the tokens too (plain codegen's)."""

  def add_indent_tokens(self):
    self.tokens.extend(self.indent_tokens)

  def add_token(self, value):
    self.tokens.append(value)
    if '\r' in value:
      self.line += len(_NEWLINE.findall(value))
    elif '\n' in value:
      self.line += value.count('\n')

  def pop_trailing_newline(self):
    if self.tokens:
      self.tokens.pop()


def _statement_classes():
  import libcst as cst  # pylint: disable=g-import-not-at-top
  return frozenset(c for c in vars(cst).values() if isinstance(c, type)
                   and issubclass(c, cst.BaseStatement))


_STATEMENTS = None  # libcst's statement classes


class _SpanState(_TextLineState):
  """``_TextLineState`` that records the lines of each statement
  (``code_statements_and_lines``'s ``spans``)."""

  def __init__(self, default_indent, default_newline, spans):
    super().__init__(default_indent, default_newline)
    global _STATEMENTS
    if _STATEMENTS is None:
      _STATEMENTS = _statement_classes()
    self.statements = _STATEMENTS
    self.spans = spans
    self.open = {}

  def before_codegen(self, node):
    self.lines[id(node)] = self.line
    if type(node) in self.statements:
      self.open[id(node)] = (self.line, tuple(self.indent_tokens))

  def after_codegen(self, node):
    if type(node) in self.statements:
      start, indent = self.open.pop(id(node))
      if indent:  # (a top-level statement's text is known)
        self.spans[id(node)] = (node, start, self.line, indent)


def code_statements_and_lines(module, spans=None):
  """``(module.code, [module.code_for_node(s) for s in module.body],
  start_lines(module))`` in one code generation instead of two (a parsed
  file needs its statement texts, and the start lines of its nodes as
  written for the report, almost always): ``Module._codegen`` as libcst
  runs it, each top-level statement's text the slice of the tokens it
  added (tests/test_upgrade_positions.py checks all three against
  libcst's own).

  ``spans``: a dict to fill with ``id(stmt) -> (stmt, first line, the
  line after it, the indentation it was written at)`` for every statement
  inside a block (a statement starts and ends at a line's start: its text
  is those lines of the code; cst_util.StatementTexts reuses it)."""
  state = (_TextLineState(module.default_indent, module.default_newline)
           if spans is None else
           _SpanState(module.default_indent, module.default_newline, spans))
  state.before_codegen(module)
  for line in module.header:
    line._codegen(state)  # pylint: disable=protected-access
  texts = []
  tokens = state.tokens
  for stmt in module.body:
    start = len(tokens)
    stmt._codegen(state)  # pylint: disable=protected-access
    texts.append(''.join(tokens[start:]))
  for line in module.footer:
    line._codegen(state)  # pylint: disable=protected-access
  if module.has_trailing_newline:
    if not tokens:
      state.add_token(state.default_newline)
  else:
    state.pop_trailing_newline()
  state.after_codegen(module)
  if spans:
    import libcst as cst  # pylint: disable=g-import-not-at-top
    for node, _, _, _ in list(spans.values()):
      if type(node) is cst.If and type(node.orelse) is cst.If:
        # an ``elif``: its text is not that of an ``if`` statement
        spans.pop(id(node.orelse), None)
  return ''.join(tokens), texts, state.lines


class _Pos:
  """What rules read of a position: ``pos.start.line``."""

  __slots__ = ('line',)

  def __init__(self, line):
    self.line = line

  @property
  def start(self):
    return self


class LazyPositions:
  """``.get(node)`` -> a position with ``.start.line`` (or None), as
  ``PositionProvider``'s map of ``module`` has, worked out at the first
  look-up."""

  def __init__(self, module, lines=None):
    """``lines``: ``start_lines(module)`` if the caller has it."""
    self._module = module
    self._lines = lines

  def get(self, node, default=None):
    if self._lines is None:
      self._lines = start_lines(self._module)
    line = self._lines.get(id(node))
    return default if line is None else _Pos(line)

