"""The upgrade's start lines (positions.py) against libcst's PositionProvider."""

import os

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider
import pytest

from flaxlegacy.upgrade import positions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SNIPPETS = [
    'x = 1\n',
    '\n\n# comment\n@decorator\n\nclass A(B):\n  """Doc."""\n\n  def f(self, x,\n'
    '        y=2):\n    return (x +\n            y)\n',
    'if a:\n  pass\nelif b:  # c\n  pass\nelse:\n  z = [1,\n       2]\n',
    'x = 1\r\ny = (2,\r\n     3)\r\n',
    'x = 1\ry = (2,\r     3)\r',
    'try:\n  f()\nexcept (A, B) as e:\n  raise\nfinally:\n  g()\n',
    'with a as b, c:\n  async def f():\n    await x\n',
    'lambda x: x\nf(*a, **k)\nx[1:2, ...]\n',
    's = ("a"\n     "b" f"{x!r:>3}")\n',
]


def _expected(module):
  pos = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
  return {id(node): p.start.line for node, p in pos.items()}


def _files():
  out = []
  for sub in ('examples', os.path.join('flaxlegacy', 'upgrade')):
    for dirpath, _, files in os.walk(os.path.join(ROOT, sub)):
      out += [os.path.join(dirpath, f) for f in sorted(files)
              if f.endswith('.py')]
  return sorted(out)[:40]


@pytest.mark.parametrize('code', SNIPPETS)
def test_snippets_match_position_provider(code):
  module = cst.parse_module(code)
  assert positions.start_lines(module) == _expected(module)


def test_files_match_position_provider():
  files = _files()
  assert len(files) >= 20
  for path in files:
    with open(path, encoding='utf-8') as fh:
      module = cst.parse_module(fh.read())
    got = positions.start_lines(module)
    want = _expected(module)
    assert got == want, path


def test_lazy_positions_read_like_position_provider():
  module = cst.parse_module('a = 1\n\nb = f(\n    2)\n')
  lazy = positions.LazyPositions(module)
  call = module.body[1].body[0].value
  assert lazy.get(call).start.line == 3
  assert lazy.get(call.args[0]).start.line == 4
  assert lazy.get(cst.Name('zz')) is None
  assert lazy.get(cst.Name('zz'), 'none') == 'none'



@pytest.mark.parametrize('code', SNIPPETS + [
    '', '\n', '# only a comment', 'x = 1', '# c\n\nx = 1\n# end\n\n',
    'if a:\n  x = 1\n  # trailing\n# dedented\n'])
def test_code_statements_and_lines_match_libcst(code):
  # one code generation for the parse (api.py): the module's code, each
  # top-level statement's code and the start lines, as libcst gives them
  module = cst.parse_module(code)
  got_code, texts, lines = positions.code_statements_and_lines(module)
  assert got_code == module.code
  assert texts == [module.code_for_node(s) for s in module.body]
  assert lines == _expected(module)


def test_code_statements_and_lines_match_libcst_on_files():
  for path in _files():
    with open(path, encoding='utf-8') as fh:
      module = cst.parse_module(fh.read())
    got_code, texts, lines = positions.code_statements_and_lines(module)
    assert got_code == module.code, path
    assert texts == [module.code_for_node(s) for s in module.body], path
    assert lines == _expected(module), path
