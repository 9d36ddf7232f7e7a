"""The upgrade's shortcuts (speed, issue 24) answer what the plain ways
answer: the statement filter of transform.py, ``legacy_attr`` of names and
calls, and the command line's start-up."""

import os
import re
import subprocess
import sys
import types

import libcst as cst

from flaxlegacy.upgrade import api
from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import transform
from flaxlegacy.upgrade.rules import jax_names

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _statement_texts():
  out = []
  for sub in ('examples', 'tests'):
    for dirpath, _, files in os.walk(os.path.join(ROOT, sub)):
      for f in sorted(files):
        if f.endswith('.py'):
          with open(os.path.join(dirpath, f), encoding='utf-8') as fh:
            module = cst.parse_module(fh.read())
          out.extend(cst_util.code_and_statements(module)[1])
  return out


def _regex(words, alternatives):
  """The filter as one regex (what transform.py searched before)."""
  return re.compile('|'.join(
      [r'\bimport\b'] + list(alternatives)
      + [r'\b' + re.escape(w) + r'\b' for w in sorted(words)]))


def test_statement_filter_is_the_regex_of_its_words():
  texts = _statement_texts() + [
      'x = nn_Dense(1)', 'y = Dense_(2)', 'z = a.Dense', 'importer = 1',
      'w = x.partial(3)', 'v = jax.config', 'q = é_Dense + Dense', 'm.b-c',
      's = "Dense"', 'k = init_by_shape', 'from a import b']
  assert len(texts) > 1000
  words = {'Dense', 'Conv', 'nn', 'tree_multimap', 'b-c', 'é_x', 'partial'}
  alternatives = [r'\.partial\b', r'\.shared\b', 'jax\\.config',
                  r'_by_shape\b', r'\b(?:np)\.float\b']
  fast = transform._Relevance(words | {'import'}, alternatives)  # pylint: disable=protected-access
  slow = _regex(words, alternatives)
  assert 'b-c' not in fast.words  # not a whole-word run: left to the regex
  matched = 0
  for text in texts:
    assert bool(fast.search(text)) == bool(slow.search(text)), text
    matched += bool(slow.search(text))
  assert 0 < matched < len(texts)


def test_statement_filter_of_a_file_is_the_regex_it_was():
  """transform._relevance of the files of examples/: the same statements
  as the one regex it compiled before."""
  files = []
  for root, rel, path in api._walk(os.path.join(ROOT, 'examples')):  # pylint: disable=protected-access
    if path.endswith('.py'):
      sf = api.SourceFile(root, rel, path)
      with open(path, encoding='utf-8') as fh:
        sf.code = fh.read()
      api._parse(sf)  # pylint: disable=protected-access
      files.append(sf)
  codebase = api._analyse(files)  # pylint: disable=protected-access
  checked = 0
  for sf in files:
    f = codebase.files[sf.rel]
    words = {q.rsplit('.', 1)[-1] for q in list(jax_names.RENAMES) + list(
        jax_names.UNSURE) + list(jax_names.CALLS) + list(
            jax_names.MODULE_RENAMES)}
    words.update(f.modules, f.partial_helpers,
                 getattr(f, 'partial_aliases', ()))
    for other in codebase.files.values():
      words.update(other.modules)
    words.update(p.split('.')[-1] for p in f.nn_prefixes)
    alternatives = [r'\.partial\b', r'\.shared\b', 'jax\\.config',
                    r'_by_shape\b']
    removed = jax_names.removed_name_pattern(f.imports)
    if removed:
      alternatives.append(removed)
    slow = _regex(words, alternatives)
    fast = transform._relevance(f, codebase)  # pylint: disable=protected-access
    for text in sf.statement_texts:
      assert bool(fast.search(text)) == bool(slow.search(text)), text
      checked += 1
  assert checked > 100


def _legacy_attr_as_written(node, prefixes):
  """cst_util.legacy_attr without its shortcut for names and calls."""
  name = cst_util.dotted(node) if isinstance(
      node, (cst.Attribute, cst.Name)) else None
  if not name:
    return None
  inner = node
  while isinstance(inner, cst.Attribute):
    inner = inner.value
  if not isinstance(inner, cst.Name):
    return None
  for p in prefixes:
    if name.startswith(p + '.'):
      attr = name[len(p) + 1:]
      head, _, rest = attr.partition('.')
      if rest in cst_util.SUBMODULE_REEXPORTS.get(head, ()):
        return rest
      return attr
  return None


def test_legacy_attr_of_every_node_as_written():
  seen = []

  class V(cst.CSTVisitor):

    def on_visit(self, node):
      seen.append(node)
      return True

  src = ('from flax import nn\nx = nn.Dense(3)(nn)\ny = nn.linear.Dense\n'
         'z = nn.base.Model(f)(x).nn\nnn[1].Conv\n')
  cst.parse_module(src).visit(V())
  for dirpath, _, files in os.walk(os.path.join(ROOT, 'examples')):
    for f in sorted(files):
      if f.endswith('.py'):
        with open(os.path.join(dirpath, f), encoding='utf-8') as fh:
          cst.parse_module(fh.read()).visit(V())
  found = 0
  for node in seen:
    for prefixes in (('nn',), ('flax.nn', 'nn'), ()):
      want = _legacy_attr_as_written(node, prefixes)
      assert cst_util.legacy_attr(node, prefixes) == want, node
      found += want is not None
  assert found > 50


def test_upgrade_command_imports_no_other_subcommand(tmp_path):
  """``flaxlegacy upgrade`` reads only its own subcommand's arguments: the
  others' modules (data: numpy; convert: absl) are not imported."""
  code = ('import sys\n'
          'from flaxlegacy import cli\n'
          'try:\n'
          '  cli.main(["upgrade", "--help"])\n'
          'except SystemExit:\n'
          '  pass\n'
          'print(sorted(m for m in ("numpy", "absl", "flaxlegacy.datasets",\n'
          '                         "flaxlegacy.migrate.convert")\n'
          '             if m in sys.modules))\n')
  import flaxlegacy  # pylint: disable=g-import-not-at-top
  here = os.path.dirname(os.path.dirname(os.path.abspath(flaxlegacy.__file__)))
  env = dict(os.environ, FLAXLEGACY='off', PYTHONPATH=here)
  out = subprocess.run([sys.executable, '-c', code], env=env, cwd=tmp_path,
                       capture_output=True, text=True, check=True).stdout
  assert 'usage:' in out and '--out' in out
  assert out.splitlines()[-1] == '[]'
  # the top-level help still lists every subcommand
  out = subprocess.run([sys.executable, '-m', 'flaxlegacy', '--help'],
                       env=env, cwd=tmp_path, capture_output=True, text=True,
                       check=True).stdout
  for name in ('run', 'check', 'convert', 'data', 'upgrade'):
    assert name in out


def test_prepare_works_out_what_forked_workers_would_each_repeat():
  """transform.prepare (before the workers fork) leaves the codebase-wide
  analyses the rules ask for worked out, so each worker inherits them."""
  src = ('from flax import nn\n\n\ndef feats(x):\n  return nn.Dense(x, 2)\n\n\n'
         'class M(nn.Module):\n\n  def apply(self, x):\n    return feats(x)\n')
  sf = api.SourceFile('', 'm.py', 'm.py')
  sf.code = src
  api._parse(sf)  # pylint: disable=protected-access
  codebase = api._analyse([sf])  # pylint: disable=protected-access
  assert codebase.analyses.worked_out() == []
  transform.prepare(codebase)
  assert codebase.analyses.worked_out() == [
      'autoname_stack', 'layer_function_callers', 'model_uses']
  analysis = codebase.analyses.autoname_stack()
  assert analysis.functions == {('m.py', 'feats')}
  # the rules read the same object, not a second analysis
  up = types.SimpleNamespace(ctx=types.SimpleNamespace(
      codebase=codebase, facts=codebase.files['m.py']))
  from flaxlegacy.upgrade.rules import autoname_stack  # pylint: disable=g-import-not-at-top
  assert codebase.analyses.autoname_stack() is analysis
  assert autoname_stack.role(up, codebase.files['m.py'].modules['M']) == (
      'body')


def test_expr_of_a_dotted_name_is_the_parsers_tree():
  for src in ('functools.partial', 'nn', 'a.b.c.d', 'None', 'True.x',
              'legacy_model.Model', 'match', '_x._y9'):
    built = cst_util.expr(src)
    parsed = cst.parse_expression(src)
    assert built.deep_equals(parsed), src
    assert cst_util.code(built) == src
  # anything else is the parser's, errors included
  assert cst_util.expr('f(a, b=1)').deep_equals(cst.parse_expression(
      'f(a, b=1)'))
  for bad in ('lambda', 'a.if', 'a.', '1a'):
    try:
      cst.parse_expression(bad)
    except cst.ParserSyntaxError:
      pass
    else:
      raise AssertionError(bad)
    try:
      cst_util.expr(bad)
    except cst.ParserSyntaxError:
      continue
    raise AssertionError(bad)


_BLOCKS = '''\
import x


# lead
@dec  # d
def f(a,
      b):  # head
  """Doc."""
  y = a  # one
  # between

  for i in range(3):
    if i:
      z = i
    elif a:
      z = 2
    else:
      z = 3
  try:
    w = 1
  except E as e:  # handler
    w = 2
  finally:
    w = 3
  while y:
    y -= 1
  else:
    pass
  with g() as h:
    return h
  # footer


class C:
\tdef m(self):
\t\treturn 1
if a:
    b = 1
elif c:
    d = 2
'''


def _sources_with_blocks():
  out = [_BLOCKS, _BLOCKS.rstrip('\n'), _BLOCKS.replace('\n', '\r\n')]
  for sub in ('examples', os.path.join('flaxlegacy', 'upgrade', 'rules')):
    for dirpath, _, files in os.walk(os.path.join(ROOT, sub)):
      for f in sorted(files):
        if f.endswith('.py'):
          with open(os.path.join(dirpath, f), encoding='utf-8') as fh:
            out.append(fh.read())
  return out


def test_spans_are_the_texts_of_inner_statements_as_written():
  from libcst._nodes.internal import CodegenState  # pylint: disable=g-import-not-at-top
  from flaxlegacy.upgrade import positions  # pylint: disable=g-import-not-at-top
  checked = 0
  for src in _sources_with_blocks():
    module = cst.parse_module(src)
    spans = {}
    code, texts, lines = positions.code_statements_and_lines(module, spans)
    assert (code, texts, lines) == positions.code_statements_and_lines(
        module)
    known = cst_util.StatementTexts(module, texts, spans, code)
    for stmt, _, _, indent in spans.values():
      assert type(stmt) is not cst.If or not cst_util.code(  # pylint: disable=unidiomatic-typecheck
          stmt).startswith('elif')
      state = CodegenState(default_indent=module.default_indent,
                           default_newline=module.default_newline,
                           indent_tokens=list(indent))
      stmt._codegen(state)  # pylint: disable=protected-access
      want = ''.join(state.tokens)
      got = known._written(stmt)  # pylint: disable=protected-access
      if got is None:  # only the file's last line, without its newline
        assert not src.endswith('\n') and code.endswith(want.rstrip('\n'))
        continue
      assert got == (want, indent)
      checked += 1
  assert checked > 500


def test_hashes_of_a_statement_are_those_of_its_text():
  # cst_util.keep_comments walks only statements whose text as written
  # holds a '#' (StatementTexts.hashes): the count must be the text's, for
  # top-level and inner statements, their comment lines above included
  from flaxlegacy.upgrade import positions  # pylint: disable=g-import-not-at-top
  checked = commented = 0
  for src in _sources_with_blocks():
    module = cst.parse_module(src)
    spans = {}
    code, texts, _ = positions.code_statements_and_lines(module, spans)
    known = cst_util.StatementTexts(module, texts, spans, code)
    stmts = list(module.body) + [v[0] for v in spans.values()]
    for stmt in stmts:
      want = cst_util.code(stmt).count('#')
      got = known.hashes(stmt)
      if got is None:  # only the file's last line, without its newline
        continue
      assert got == want, cst_util.code(stmt)
      checked += 1
      commented += bool(want)
  assert checked > 500 and commented > 50, (checked, commented)
  # an inner statement with a comment line above it and one inside
  module = cst.parse_module('def f():\n  x = 1\n  # lead\n  y = g(1,  # in\n'
                            '        2)\n')
  spans = {}
  code, texts, _ = positions.code_statements_and_lines(module, spans)
  known = cst_util.StatementTexts(module, texts, spans, code)
  x, y = module.body[0].body.body
  assert (known.hashes(x), known.hashes(y)) == (0, 2)


def test_changed_statements_written_from_the_texts_of_their_blocks():
  """StatementTexts of statements changed below (one name renamed, a
  statement moved one block deeper, a TODO added, an elif turned into an
  if of the block): libcst's code of them, with the spans and without."""
  from flaxlegacy.upgrade import positions  # pylint: disable=g-import-not-at-top
  from flaxlegacy.upgrade import walk  # pylint: disable=g-import-not-at-top

  class Rename(walk.FastTransformer):

    def leave_Name(self, original_node, updated_node):
      if updated_node.value in ('z', 'w', 'self', 'x'):
        return updated_node.with_changes(value=updated_node.value + '_')
      return updated_node

  class Deeper(walk.FastTransformer):
    """The first statement of each function body also inside an ``if``."""

    def leave_FunctionDef(self, original_node, updated_node):
      body = list(updated_node.body.body)
      if not body or not isinstance(updated_node.body, cst.IndentedBlock):
        return updated_node
      inner = cst.If(test=cst.Name('flag'),
                     body=cst.IndentedBlock(body=[body[0]]))
      return updated_node.with_changes(
          body=updated_node.body.with_changes(body=[inner] + body))

  class Todo(walk.FastTransformer):

    def leave_For(self, original_node, updated_node):
      return cst_util.add_todos(updated_node, ['why'])

  class ElifOut(walk.FastTransformer):
    """An ``elif`` becomes a statement of the ``if``'s block."""

    def leave_If(self, original_node, updated_node):
      if isinstance(updated_node.orelse, cst.If) and isinstance(
          updated_node.body, cst.IndentedBlock):
        return updated_node.with_changes(
            orelse=None, body=updated_node.body.with_changes(
                body=list(updated_node.body.body) + [updated_node.orelse]))
      return updated_node

  checked = 0
  for src in _sources_with_blocks():
    module = cst.parse_module(src)
    spans = {}
    code, texts, _ = positions.code_statements_and_lines(module, spans)
    for t in (Rename, Deeper, Todo, ElifOut):
      new = walk.transform(module, t())
      if new is module:
        continue
      with_spans = cst_util.StatementTexts(module, texts, spans, code)
      without = cst_util.StatementTexts(module, texts)
      want = [new.code_for_node(s) for s in new.body]
      assert with_spans.of(new) == want
      assert without.of(new) == want
      assert with_spans.code(new) == new.code
      checked += 1
  assert checked > 50


def test_shipping_nodes_are_ast_walks():
  import ast  # pylint: disable=g-import-not-at-top
  from flaxlegacy.upgrade import shipping  # pylint: disable=g-import-not-at-top
  for src in _sources_with_blocks() + ['d = {**a, "k": v}\nf(*a, **k)\n']:
    tree = ast.parse(src)
    want = [id(n) for n in ast.walk(tree)]
    got = [id(n) for n in shipping._nodes(tree)]  # pylint: disable=protected-access
    assert sorted(got) == sorted(want)  # (the same nodes, as often)


def test_upgrade_command_leaves_its_garbage_to_the_exit(tmp_path):
  """``python -m flaxlegacy upgrade`` freezes the collector before exiting
  (the trees' cyclic garbage is not walked again at exit); the output is
  the library's; other commands do not freeze."""
  import flaxlegacy  # pylint: disable=g-import-not-at-top
  here = os.path.dirname(os.path.dirname(os.path.abspath(flaxlegacy.__file__)))
  src = tmp_path / 'src'
  src.mkdir()
  (src / 'm.py').write_text(
      'from flax import nn\n\n\nclass M(nn.Module):\n\n'
      '  def apply(self, x):\n    return nn.Dense(x, 3)\n')
  code = ('import gc, runpy, sys\n'
          'called = []\n'
          'gc.freeze = lambda: called.append(1)\n'
          'sys.argv = ["flaxlegacy"] + sys.argv[1:]\n'
          'try:\n'
          '  runpy.run_module("flaxlegacy", run_name="__main__")\n'
          'except SystemExit as e:\n'
          '  print("exit", e.code, len(called))\n')
  env = dict(os.environ, FLAXLEGACY='off', PYTHONPATH=here)
  out = subprocess.run(
      [sys.executable, '-c', code, 'upgrade', str(src), '--out',
       str(tmp_path / 'dst')], env=env, cwd=tmp_path, capture_output=True,
      text=True, check=True)
  assert out.stdout.splitlines()[-1] == 'exit 0 1', out.stderr
  want, _ = api.upgrade_source((src / 'm.py').read_text(), 'm.py')
  assert (tmp_path / 'dst' / 'm.py').read_text() == want
  out = subprocess.run([sys.executable, '-c', code, 'check', str(src)],
                       env=env, cwd=tmp_path, capture_output=True, text=True,
                       check=True)
  assert out.stdout.splitlines()[-1].endswith(' 0'), out.stdout
