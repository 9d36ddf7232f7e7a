"""What the early-linen rules share: linen names of a file, reporting, TODOs."""

import types

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import positions as positions_lib
from flaxlegacy.upgrade import walk

TODO_PREFIX = cst_util.TODO_PREFIX
_LINEN_MODULES = ('flax.linen', 'flax.linen.recurrent', 'flax.linen.attention',
                  'flax.linen.linear', 'flax.linen.module')
TRANSFORMS = ('scan', 'vmap', 'jit', 'remat', 'checkpoint', 'map_variables',
              'named_call')


class LinenNames:
  """Resolves a file's names through its imports (``FileFacts.imports``)."""

  def __init__(self, imports):
    self.imports = dict(imports)

  def uses_flax(self):
    return any(v == 'flax' or v.startswith('flax.')
               for v in self.imports.values())

  def qualify(self, node):
    name = cst_util.dotted(node) if isinstance(
        node, (cst.Name, cst.Attribute)) else None
    if not name:
      return None
    head, _, rest = name.partition('.')
    full = self.imports.get(head)
    if full is None:
      return None
    return full + ('.' + rest if rest else '')

  def linen(self, node):
    """'LSTMCell' for ``nn.LSTMCell`` / ``LSTMCell`` of flax.linen, else None."""
    q = self.qualify(node)
    if not q:
      return None
    for module in _LINEN_MODULES:
      if q.startswith(module + '.') and '.' not in q[len(module) + 1:]:
        return q[len(module) + 1:]
    return None

  def linen_transform(self, node):
    q = self.qualify(node)
    if not q:
      return False
    for module in ('flax.linen', 'flax.linen.transforms'):
      if q in (f'{module}.{t}' for t in TRANSFORMS):
        return True
    return False

  def imports_module(self, prefix):
    return any(v == prefix or v.startswith(prefix + '.')
               for v in self.imports.values())

  def spell(self, qualified, needed):
    """``qualified`` as this file can write it; records a needed import."""
    best = None
    for local, full in self.imports.items():
      if qualified == full or qualified.startswith(full + '.'):
        if best is None or len(full) > len(best[1]):
          best = (local, full)
    if best is not None:
      return best[0] + qualified[len(best[1]):]
    needed.add(qualified.split('.')[0])
    return qualified


class Rule(cst_util.TodoComments, walk.FastTransformer):
  """A rule's transformer: ``rewrote`` and ``todo`` report with line numbers
  (of the module it is given), TODOs as the other rules write them."""

  NAME = ''

  def __init__(self, names, report, needed):
    super().__init__()
    self.names = names
    self.needed = needed
    self.changed = False
    self.ctx = types.SimpleNamespace(report=report)
    self._todos = []  # one list per open statement (TodoComments)
    self.positions = None  # of the module walked (apply)
    self.written = None  # of the file as written, if the caller has them
    self.code = ''  # the file's source as the rules found it (run)

  @property
  def report(self):
    return self.ctx.report

  def line(self, node):
    if self.written is not None:  # the file as written (transform.Context)
      pos = self.written.get(node)
      if pos is not None:
        return pos.start.line
    pos = self.positions.get(node)
    return pos.start.line if pos is not None else None

  _line_of = line  # (TodoComments)

  def rewrote(self, node, what, shipped=None):
    self.changed = True
    entry = {'rule': self.NAME, 'line': self.line(node), 'what': what}
    if shipped:
      entry['shipped'] = shipped
    self.report.rewritten.append(entry)

  def todo(self, node, why):
    self.changed = True
    super().todo(node, why)

  def enter_statement(self, node):
    super().enter_statement(node)
    if has_todo(node):
      # The upgrade was unsure here (legacy flax.nn code it left, a form
      # these rules did not recognise): not early linen to rewrite.
      return False
    return None


def has_todo(stmt):
  return any(l.comment is not None and l.comment.value.startswith(TODO_PREFIX)
             for l in getattr(stmt, 'leading_lines', ()))


def apply(rule, module):
  prepare = getattr(rule, 'prepare', None)
  if prepare is not None and not prepare(module):
    return module  # its facts say the walk would change nothing
  rule.positions = positions_lib.LazyPositions(module)
  new = rule.walk(module)
  return new if rule.changed else module


def e(src):
  return cst_util.expr(src)


def positional(call):
  """The positional arguments of a call, or None (``*args`` present)."""
  args = [a for a in call.args if a.keyword is None]
  if any(a.star for a in call.args):
    return None
  return args


def bind(call, names):
  """{name: Arg} for ``call``'s arguments against ``names``, or None."""
  out = {}
  for i, a in enumerate(call.args):
    if a.star:
      return None
    key = a.keyword.value if a.keyword is not None else (
        names[i] if i < len(names) else None)
    if key is None or key not in names or key in out:
      return None
    out[key] = a
  return out


def clean_args(args):
  """Arguments with commas only between them (libcst keeps trailing ones)."""
  out = []
  for i, a in enumerate(args):
    comma = cst.MaybeSentinel.DEFAULT if i == len(args) - 1 else (
        a.comma if isinstance(a.comma, cst.Comma) else cst.Comma(
            whitespace_after=cst.SimpleWhitespace(' ')))
    out.append(a.with_changes(comma=comma))
  return out


def add_imports(module, needed):
  return cst_util.add_imports(module, needed)
