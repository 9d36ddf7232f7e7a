"""walk.FastVisitor makes the calls libcst's own walk makes, in its order."""

import os

import libcst as cst
import pytest

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


def _events(module, base):
  out = []

  class Recorder(base):

    def on_visit(self, node):
      out.append(('visit', id(node)))
      return super().on_visit(node)

    def on_leave(self, original_node):
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
    assert len(fast) > 10


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
  monkeypatch.setattr(walk, '_LIBCST_WALKS', set())
  assert _events(module, walk.FastVisitor) == _events(module, cst.CSTVisitor)
  assert cst.Call in walk._LIBCST_WALKS  # pylint: disable=protected-access
