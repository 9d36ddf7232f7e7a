"""walk.FastVisitor makes the calls libcst's own walk makes, in its order."""

import os
import types

import libcst as cst
import pytest

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import walk

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ODD = '''
from . import a
from .b import (c as d,
                e)
from f import *
import g.h as i
x = f"{a!r:>{w}} {b=}" rf"{c}"
y = [*a, *b] + {**c} + {1, 2} + {k: v for k, v in d.items() if k}
z = a if b else lambda *a, k=1, **kw: (yield)
async def f(a, /, b: int = 1, *, c, **d) -> None:
  global q
  async with a as (b, c):
    async for x in y:
      await x
  try:
    pass
  except* E as e:
    raise X from e
  else:
    del a[1:2:3, ...]
  finally:
    nonlocal_ = b @ c
@dec(1)
class C(B, metaclass=M):
  t: int
  def m(self): return super().m() or not self
match p:
  case [1, *rest] | {"k": v, **kw} | Point(x=0) if rest:
    pass
  case _:
    pass
while a < b <= c is not d: break
else: a ^= 1; b >>= 2
assert a, "m"
'''


def _events(module, base, tokens=False):
  """The visits and leaves of a walk; tokens (whitespace, operators ...)
  only with ``tokens``: FastVisitor steps over them."""
  out = []

  class Recorder(base):

    def on_visit(self, node):
      if type(node) not in walk.TOKENS or tokens:
        out.append(('visit', id(node)))
      return super().on_visit(node)

    def on_leave(self, original_node):
      if type(original_node) not in walk.TOKENS or tokens:
        out.append(('leave', id(original_node)))
      super().on_leave(original_node)

  module.visit(Recorder())
  return out


def _sources():
  out = [ODD]
  for sub in ('examples', os.path.join('flaxlegacy', 'upgrade')):
    for dirpath, _, files in os.walk(os.path.join(ROOT, sub)):
      for f in sorted(files):
        if f.endswith('.py'):
          with open(os.path.join(dirpath, f), encoding='utf-8') as fh:
            out.append(fh.read())
  return out


def test_same_calls_in_the_same_order_as_libcst():
  sources = _sources()
  assert len(sources) > 20
  for src in sources:
    module = cst.parse_module(src)
    fast = _events(module, walk.FastVisitor)
    assert fast == _events(module, cst.CSTVisitor)
    assert len(fast) > 2


def _hooked_events(module, base, skip=()):
  """The visits and leaves of a walk whose visitor has a ``visit_X`` and a
  ``leave_X`` for every node class but the tokens (no ``on_visit`` of its
  own: FastVisitor's per-class walk); ``visit_X`` answers False for the
  classes in ``skip``."""
  out = []
  hooks = {}
  for name in dir(cst):
    c = getattr(cst, name)
    if (isinstance(c, type) and issubclass(c, cst.CSTNode)
        and c not in walk.TOKENS):

      def visit(self, node, name=name):  # pylint: disable=unused-argument
        out.append(('visit', name, id(node)))
        return False if name in skip else None

      def leave(self, node, name=name):  # pylint: disable=unused-argument
        out.append(('leave', name, id(node)))

      hooks['visit_' + name] = visit
      hooks['leave_' + name] = leave
  module.visit(type('Hooked', (base,), hooks)())
  return out


def test_hooks_only_visitor_same_calls_as_libcst():
  kinds = set()
  for src in _sources():
    module = cst.parse_module(src)
    fast = _hooked_events(module, walk.FastVisitor)
    assert fast == _hooked_events(module, cst.CSTVisitor)
    kinds.update(e[1] for e in fast)
  assert len(kinds) > 80  # (most of the node classes)
  module = cst.parse_module(ODD)
  for skip in (('Call',), ('FunctionDef', 'Subscript'), ('Module',)):
    fast = _hooked_events(module, walk.FastVisitor, skip)
    assert fast == _hooked_events(module, cst.CSTVisitor, skip)


def test_a_walk_with_a_token_hook_walks_every_token_as_libcst():
  module = cst.parse_module(ODD + '# tail\nx = (a  # c\n     + b)\n')
  seen = {}
  for base in (walk.FastVisitor, cst.CSTVisitor):
    comments = seen[base] = []

    class V(base):  # pylint: disable=cell-var-from-loop

      def visit_Comment(self, node):
        comments.append(node.value)  # pylint: disable=cell-var-from-loop

    module.visit(V())
  assert seen[walk.FastVisitor] == seen[cst.CSTVisitor]
  assert '# c' in seen[cst.CSTVisitor] and '# tail' in seen[cst.CSTVisitor]
  tokens = []  # a token hook: every node, tokens too, as libcst

  class WithHook(walk.FastVisitor):

    def on_visit(self, node):
      tokens.append(id(node))
      return super().on_visit(node)

    def leave_Comma(self, original_node):
      pass

  module.visit(WithHook())
  assert tokens == [e[1] for e in _events(module, cst.CSTVisitor, True)
                    if e[0] == 'visit']


def test_transformer_with_a_token_hook_rewrites_tokens_as_libcst():
  module = cst.parse_module('f(a,b)\nx = [1,2]\n')

  class Spaces(walk.FastTransformer):

    def leave_Comma(self, original_node, updated_node):
      return updated_node.with_changes(
          whitespace_after=cst.SimpleWhitespace(' '))

  class SlowSpaces(cst.CSTTransformer):
    leave_Comma = Spaces.leave_Comma

  new = walk.transform(module, Spaces())
  assert new.code == module.visit(SlowSpaces()).code == 'f(a, b)\nx = [1, 2]\n'


def test_visit_returning_false_skips_children_and_leave_still_runs():
  module = cst.parse_module('def f():\n  a = 1\nb = g(c)\n')
  seen = []

  class V(walk.FastVisitor):

    def visit_FunctionDef(self, node):
      seen.append('def')
      return False

    def visit_Name(self, node):
      seen.append(node.value)

    def leave_FunctionDef(self, original_node):
      seen.append('/def')

  module.visit(V())
  assert seen == ['def', '/def', 'b', 'g', 'c']


def test_attribute_hooks_are_refused():
  with pytest.raises(TypeError, match='attribute hooks'):

    class V(walk.FastVisitor):  # pylint: disable=unused-variable

      def visit_Call_func(self, node):
        pass


def test_without_libcst_source_libcst_walks_those_nodes(monkeypatch):
  module = cst.parse_module('def f(a, b=g(1)):\n  return [a + b, c(d=2)]\n')
  real = walk.inspect.getsource

  def no_source(obj):
    if 'Call' in obj.__qualname__ or 'Param' in obj.__qualname__:
      raise OSError('no source')
    return real(obj)

  monkeypatch.setattr(walk.inspect, 'getsource', no_source)
  monkeypatch.setattr(walk, '_FIELDS', {})
  monkeypatch.setattr(walk, '_METHOD_ASTS', {})
  monkeypatch.setattr(walk, '_NONTOKEN_FIELDS', {})
  monkeypatch.setattr(walk, '_LIBCST_WALKS', set())
  assert _events(module, walk.FastVisitor) == _events(module, cst.CSTVisitor)
  assert cst.Call in walk._LIBCST_WALKS  # pylint: disable=protected-access


# --- FastTransformer ---------------------------------------------------------


def _recording(base, out):
  """A transformer that records its calls and rewrites on the way: names
  renamed, ``del`` lines dropped, ``pass`` split in two, ``drop=`` keyword
  arguments removed, ``as`` names and trailing commas of arguments dropped,
  and an ``Expr`` of ``gone()`` removed (its line left empty)."""

  class T(base):

    def on_visit(self, node):
      if type(node) not in walk.TOKENS:
        out.append(('visit', id(node)))
      return super().on_visit(node)

    def on_leave(self, original_node, updated_node):
      if type(original_node) not in walk.TOKENS:
        out.append(('leave', id(original_node), updated_node.__class__))
      return super().on_leave(original_node, updated_node)

    def visit_Lambda(self, node):
      return False  # children left as they are

    def leave_Name(self, original_node, updated_node):
      if updated_node.value in ('a', 'b'):
        return updated_node.with_changes(value=updated_node.value * 2)
      return updated_node

    def leave_SimpleStatementLine(self, original_node, updated_node):
      if any(isinstance(s, cst.Del) for s in updated_node.body):
        return cst.RemoveFromParent()
      if any(isinstance(s, cst.Pass) for s in updated_node.body):
        return cst.FlattenSentinel([updated_node, updated_node])
      return updated_node

    def leave_Arg(self, original_node, updated_node):
      if updated_node.keyword is not None and updated_node.keyword.value == (
          'drop'):
        return cst.RemoveFromParent()
      return updated_node

    def leave_Comma(self, original_node, updated_node):
      return updated_node

    def leave_AsName(self, original_node, updated_node):
      return cst.RemoveFromParent()  # optional field -> None

    def leave_Expr(self, original_node, updated_node):
      if (isinstance(updated_node.value, cst.Call) and isinstance(
          updated_node.value.func, cst.Name) and
          updated_node.value.func.value == 'gone'):
        return cst.RemoveFromParent()
      return updated_node

  return T()


def test_transformer_same_calls_and_same_result_as_libcst():
  extra = ('def h():\n  gone()\n\ndef k(a, drop=1):\n  del a\n\n'
           'f(a, drop=2, c=lambda a: a)\nimport x.y as z\n'
           'if a:\n  pass\n')
  for src in _sources() + [extra]:
    module = cst.parse_module(src)
    slow_calls, fast_calls = [], []
    slow = module.visit(_recording(cst.CSTTransformer, slow_calls))
    fast = walk.transform(module, _recording(walk.FastTransformer,
                                             fast_calls))
    assert fast.code == slow.code
    assert fast.deep_equals(slow)
    assert fast_calls == slow_calls
  fast = walk.transform(cst.parse_module(extra), _recording(
      walk.FastTransformer, []))
  assert 'gone()' not in fast.code and 'del a' not in fast.code
  assert 'pass\n  pass\n' in fast.code and 'drop=2' not in fast.code
  assert 'def h():\n  pass\n' in fast.code  # the empty body, as libcst
  assert 'import x.y\n' in fast.code and 'f(aa, c=lambda a: a)' in fast.code


def test_transformer_copies_only_what_changes():
  module = cst.parse_module('def f():\n  return x\n\ny = g(a, b)\n')

  class Nothing(walk.FastTransformer):
    pass

  assert walk.transform(module, Nothing()) is module

  class RenameA(walk.FastTransformer):

    def leave_Name(self, original_node, updated_node):
      return updated_node.with_changes(value='z') if (
          updated_node.value == 'a') else updated_node

  new = walk.transform(module, RenameA())
  assert new.code == 'def f():\n  return x\n\ny = g(z, b)\n'
  assert new.body[0] is module.body[0]  # the function: untouched, same node
  call, old_call = new.body[1].body[0].value, module.body[1].body[0].value
  assert call is not old_call and call.args[1] is old_call.args[1]
  # libcst's own walk copies everything
  assert module.visit(RenameA()).body[0] is not module.body[0]


def test_transformer_removal_where_the_parent_cannot_take_it():
  module = cst.parse_module('x = f(y)\n')

  class RemoveCallee(walk.FastTransformer):

    def leave_Call(self, original_node, updated_node):
      return cst.RemoveFromParent()

  with pytest.raises(TypeError, match='does not allow it to be removed'):
    walk.transform(module, RemoveCallee())


def test_transformer_attribute_hooks_are_refused():
  with pytest.raises(TypeError, match='attribute hooks'):

    class T(walk.FastTransformer):  # pylint: disable=unused-variable

      def leave_Call_args(self, node):
        pass


def test_code_and_statements_is_libcsts_code_and_statement_texts():
  from flaxlegacy.upgrade import cst_util  # pylint: disable=g-import-not-at-top
  odd = ['', '\n', '# only a comment', '# c\n\nx = 1', 'x = 1\n\n# tail\n',
         'def f():\n  pass\n  # inside\n# after\n', 'x = 1\r\ny = 2\r\n',
         '\ufeffx = 1\n', 'if a:\n    b\nelse:\n    c  # t']
  for src in _sources() + odd:
    module = cst.parse_module(src)
    code, texts = cst_util.code_and_statements(module)
    assert code == module.code and code == src.lstrip('\ufeff')
    assert texts == [module.code_for_node(s) for s in module.body]


def test_statement_texts_give_libcsts_code_of_changed_modules():
  """cst_util.StatementTexts: a module's code from the texts of the
  statements it keeps and the code of those it changed, as libcst's."""
  from flaxlegacy.upgrade import cst_util  # pylint: disable=g-import-not-at-top
  odd = ['x = 1\n', '# c\n\nx = 1', 'x = 1\n\n# tail\n', 'x = 1\r\ny = 2\r\n',
         'def f():\n  pass\n  # inside\n# after\n', 'if a:\n    b\nelse:\n    c  # t']

  class Rename(walk.FastTransformer):

    def leave_Name(self, original_node, updated_node):
      return updated_node.with_changes(value=updated_node.value + '_')

  for src in _sources() + odd:
    module = cst.parse_module(src)
    code, texts = cst_util.code_and_statements(module)
    known = cst_util.StatementTexts(module, texts)
    assert known.code(module) == code
    if len(module.body) < 2:
      continue
    body = list(module.body)
    body[-1] = walk.transform(body[-1], Rename())  # the last one changes
    new = module.with_changes(body=[body[-1]] + body[:-1] + body[-1:])
    assert known.code(new) == new.code
    assert known.of(new) == [new.code_for_node(s) for s in new.body]
    assert known.code(new) == new.code  # (again: from what it kept)


def test_code_is_libcsts_code_for_node():
  """cst_util.code (codegen without libcst's per-node context manager)
  writes what libcst writes, for modules, statements and expressions."""
  from flaxlegacy.upgrade import cst_util  # pylint: disable=g-import-not-at-top
  for src in _sources() + ['x = 1\r\nif a:\r\n\tb = (1,\r\n\t     2)\r\n']:
    module = cst.parse_module(src)
    assert cst_util.code(module) == module.code
    for stmt in module.body:
      assert cst_util.code(stmt, module) == module.code_for_node(stmt)
  expr = cst.parse_expression('f(a,  *b, c=[1 , 2])')
  assert cst_util.code(expr) == cst.Module(body=[]).code_for_node(expr)
  tabbed = cst.parse_module('if a:\n\tb = 1\n')
  assert cst_util.code(tabbed.body[0], tabbed) == 'if a:\n\tb = 1\n'


def test_dotted_is_libcsts_full_name():
  """cst_util.dotted answers what libcst's get_full_name_for_node answers,
  quirks included (``(a + b).x`` -> 'None.x')."""
  from libcst.helpers import get_full_name_for_node  # pylint: disable=g-import-not-at-top
  from flaxlegacy.upgrade import cst_util  # pylint: disable=g-import-not-at-top
  seen = []

  class V(cst.CSTVisitor):

    def on_visit(self, node):
      seen.append(node)
      return True

  for src in _sources()[:10] + ['(a + b).x.y\nf().x\na[1].b\nx.y.z\n'
                                '"s".join\n(a).b\na.b(c).d\n@d.e\ndef f(): pass\n']:
    cst.parse_module(src).visit(V())
  assert len(seen) > 1000
  for node in seen:
    assert cst_util.dotted(node) == get_full_name_for_node(node), node
  assert cst_util.dotted(cst.parse_expression('(a + b).x')) == 'None.x'


def _hooked_transformer(bases, out):
  """A transformer of hooks only (no on_visit / on_leave of its own): every
  visit / leave recorded, names and statements changed as ``_recording``'s,
  and with cst_util.TodoComments among ``bases`` a TODO at every call of
  ``f``."""
  hooks = {}
  for name in dir(cst):
    c = getattr(cst, name)
    if (isinstance(c, type) and issubclass(c, cst.CSTNode)
        and c not in walk.TOKENS):

      def visit(self, node, name=name):  # pylint: disable=unused-argument
        out.append(('visit', name, id(node)))

      def leave(self, original_node, updated_node, name=name):  # pylint: disable=unused-argument
        out.append(('leave', name, id(original_node)))
        return updated_node

      hooks['visit_' + name] = visit
      hooks['leave_' + name] = leave
  rec = _recording(cst.CSTTransformer, [])
  for name in ('leave_Name', 'leave_SimpleStatementLine', 'leave_Arg',
               'leave_AsName', 'leave_Expr', 'visit_Lambda'):
    inner = getattr(type(rec), name)

    def hook(self, *args, inner=inner, name=name):
      out.append((name, id(args[0])))
      return inner(self, *args)

    hooks[name] = hook

  def leave_Call(self, original_node, updated_node):
    out.append(('leave', 'Call', id(original_node)))
    if hasattr(self, 'todo') and cst_util.dotted(updated_node.func) == 'f':
      self.todo(original_node, 'a call of f')
    return updated_node

  hooks['leave_Call'] = leave_Call
  t = type('Hooked', bases, hooks)()
  t._todos = []  # pylint: disable=protected-access
  t.ctx = types.SimpleNamespace(report=types.SimpleNamespace(left=[]),
                                line=lambda node: None)
  return t


def test_hooks_only_transformers_same_calls_and_result_as_libcst():
  """FastTransformer's walk of a transformer of hooks only, and of one
  with cst_util.TodoComments (its statement calls made by the walk):
  libcst's calls, result and TODOs."""
  extra = ('def h():\n  gone()\n\ndef k(a, drop=1):\n  del a\n  f(a)\n\n'
           'f(a, drop=2, c=lambda a: a)\nimport x.y as z\n'
           'if a:\n  pass\n  x = f(f(b))\n')
  for mixins in ((), (cst_util.TodoComments,)):
    for src in _sources()[:20] + [extra]:
      module = cst.parse_module(src)
      slow_calls, fast_calls = [], []
      slow_t = _hooked_transformer(mixins + (cst.CSTTransformer,), slow_calls)
      fast_t = _hooked_transformer(mixins + (walk.FastTransformer,),
                                   fast_calls)
      slow = module.visit(slow_t)
      fast = walk.transform(module, fast_t)
      assert fast.code == slow.code
      assert fast_calls == slow_calls
      assert fast_t.ctx.report.left == slow_t.ctx.report.left
    assert walk._TPLANS[type(fast_t)][0] == (  # pylint: disable=protected-access
        walk._STATEMENTS if mixins else walk._HOOKS_ONLY)  # pylint: disable=protected-access
  assert fast.code.count('# TODO(flaxlegacy upgrade): a call of f') == 3
