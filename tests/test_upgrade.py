"""flaxlegacy upgrade: rule cases (input -> output), idempotence, comments,
the command's modes and exit codes, bad input, the report."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from flaxlegacy.upgrade import upgrade_source

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def up(src):
  return upgrade_source(textwrap.dedent(src))[0]


def body(src):
  """The upgraded code without the import lines the rules add."""
  return '\n'.join(l for l in up(src).splitlines()
                   if not l.startswith(('import ', 'from ')))


# (name, legacy source, expected substrings of the upgraded source)
CASES = [
    ('jax_tree_multimap', 'import jax\ny = jax.tree_multimap(f, a, b)\n',
     ['jax.tree_util.tree_map(f, a, b)']),
    ('jax_index_update', 'import jax\ny = jax.ops.index_update(x, 0, 1.)\n',
     ['y = x.at[0].set(1.)']),
    ('jax_index_add_from_import',
     'from jax import ops\ny = ops.index_add(x, i, v)\n', ['x.at[i].add(v)']),
    ('jax_config', 'from jax.config import config\n',
     ['from jax import config']),
    ('lax_tie_in', 'from jax import lax\ny = lax.tie_in(a, b)\n', ['y = b']),
    ('jax_host_id', 'import jax\nn = jax.host_id()\n',
     ['jax.process_index()']),
    ('jax_optimizers_import',
     'from jax.experimental import optimizers\n',
     ['from jax.example_libraries import optimizers']),
    ('import_nn', 'from flax import nn\n', ['from flax import linen as nn']),
    ('import_deprecated_nn', 'from flax.deprecated import nn\n',
     ['from flax import linen as nn']),
    ('layer_call', '''
        from flax import nn
        class M(nn.Module):
          def apply(self, x):
            return nn.Dense(x, 10, bias=False, name='fc')
        ''', ["nn.Dense(10, use_bias=False, name='fc')(x)", '@nn.compact',
              'def __call__(self, x):']),
    ('fields_and_call', '''
        from flax import nn
        class M(nn.Module):
          def apply(self, x, features, train=False):
            x = nn.Dense(x, features)
            return nn.dropout(x, 0.5, deterministic=not train)
        ''', ['features: Any\n', 'train: bool = False',
              'nn.Dense(self.features)(x)',
              'nn.Dropout(rate=0.5, deterministic=not self.train)(x)']),
    ('param_order', '''
        from flax import nn
        class M(nn.Module):
          def apply(self, x):
            w = self.param('w', (x.shape[-1], 3), nn.initializers.zeros)
            return x @ w
        ''', ["self.param('w', nn.initializers.zeros, (x.shape[-1], 3))"]),
    ('state', '''
        from flax import nn
        class M(nn.Module):
          def apply(self, x):
            m = self.state('mean', x.shape[-1:], nn.initializers.zeros)
            return x - m.value
        ''', ["self.variable('batch_stats', 'mean', nn.initializers.zeros, "
              'None, x.shape[-1:])']),
    ('batchnorm_defaults', '''
        from flax import nn
        class M(nn.Module):
          def apply(self, x):
            return nn.BatchNorm(x, momentum=0.9, scale=False, name='bn')
        ''', ["nn.BatchNorm(momentum=0.9, use_scale=False, name='bn', "
              'use_running_average=False)(x)']),
    ('make_rng', '''
        from flax import nn
        class M(nn.Module):
          def apply(self, x):
            return x + jax.random.normal(nn.make_rng(), x.shape)
        ''', ["self.make_rng('dropout')"]),
    ('autoname_shared_counter', '''
        from flax import nn
        class M(nn.Module):
          def apply(self, x):
            x = nn.Dense(x, 3)
            x = nn.Conv(x, 3, (1, 1))
            return nn.Dense(x, 3)
        ''', ['nn.Dense(3)(x)', "nn.Conv(3, (1, 1), name='Conv_1')(x)",
              "nn.Dense(3, name='Dense_2')(x)"]),
    ('autoname_literal_loop', '''
        from flax import nn
        class M(nn.Module):
          def apply(self, x):
            for f in (4, 8):
              x = nn.Conv(x, f, (3, 3))
            return nn.Dense(x, 3)
        ''', ['nn.Conv(f, (3, 3))(x)', "nn.Dense(3, name='Dense_2')(x)"]),
    ('autoname_dynamic_loop', '''
        from flax import nn
        class M(nn.Module):
          def apply(self, x, n):
            for _ in range(n):
              x = nn.Dense(x, 3)
            return nn.Conv(x, 3, (1, 1))
        ''', ['legacy_autoname = itertools.count()',
              "name=f'Dense_{next(legacy_autoname)}'",
              "name=f'Conv_{next(legacy_autoname)}'"]),
    ('submodule_call_and_partial', '''
        from flax import nn
        class Block(nn.Module):
          def apply(self, x, features, train=True):
            return nn.Dense(x, features)
        class Net(nn.Module):
          def apply(self, x):
            dense = nn.Dense.partial(bias=False)
            x = dense(x, 5, name='d')
            return Block(x, 4, train=False, name='b')
        NETS = {'a': Net.partial()}
        ''', ['dense = functools.partial(nn.Dense, use_bias=False)',
              "dense(features=5, name='d')(x)",
              "Block(features=4, train=False, name='b')(x)",
              "NETS = {'a': functools.partial(Net)}"]),
    ('shared', '''
        from flax import nn
        class M(nn.Module):
          def apply(self, x):
            tied = nn.Dense.shared(features=3, name='tied')
            return tied(tied(x))
        ''', ["tied = nn.Dense(features=3, name='tied')",
              'return tied(tied(x))']),
    ('module_function', '''
        from flax import nn
        @nn.module
        def Block(x, hidden):
          return nn.Dense(x, hidden, name='fc')
        ''', ['class Block(nn.Module):', 'hidden: Any',
              "nn.Dense(self.hidden, name='fc')(x)"]),
]


@pytest.mark.parametrize('name,src,expected', CASES,
                         ids=[c[0] for c in CASES])
def test_rule(name, src, expected):
  del name
  out = up(src)
  for e in expected:
    assert e in out, out


TODO_CASES = [
    ('attention', '''
        from flax import nn
        class M(nn.Module):
          def apply(self, x):
            return nn.SelfAttention(nn.LayerNorm(x), num_heads=2)
        ''', 'the inputs must be plain variables'),
    ('is_initializing_of_a_shared_module', '''
        from flax import nn
        class Step(nn.Module):
          def apply(self, x):
            if self.is_initializing():
              return x
            return nn.Dense(x, 2, name='d')
        class Net(nn.Module):
          def apply(self, x):
            s = Step.shared(name='s')
            return s(s(x))
        ''', 'legacy is_initializing() is False in the second and later '
        'calls of a shared instance during init'),
    ('program_level', '''
        from flax import nn
        class M(nn.Module):
          def apply(self, x):
            return x
        # the assignment form is rewritten (tests/test_upgrade_programs.py);
        # an init whose (output, params) pair is used as one value is not
        pair = M.init_by_shape(key, [((1, 3), jnp.float32)])
        ''', 'M.init_by_shape: legacy module life cycle is program-level'),
    ('normalize', 'import jax\ny = jax.nn.normalize(x)\n',
     'jax.nn.normalize was removed'),
]


@pytest.mark.parametrize('name,src,why', TODO_CASES,
                         ids=[c[0] for c in TODO_CASES])
def test_unsure_leaves_todo(name, src, why):
  del name
  out, report = upgrade_source(textwrap.dedent(src))
  todo = [l for l in out.splitlines() if 'TODO(flaxlegacy upgrade)' in l]
  assert any(why in l for l in todo), out
  assert any(why in item['why'] for item in report.left)


def test_comments_and_formatting_survive():
  src = textwrap.dedent('''\
      """Doc."""
      from flax import nn  # the legacy API


      class M(nn.Module):
        """A module."""

        def apply(self, x, features):
          # first layer
          x = nn.Dense(x, features)  # trailing
          return x
      ''')
  out = up(src)
  for keep in ('"""Doc."""', '# the legacy API', '"""A module."""',
               '# first layer', '# trailing'):
    assert keep in out


COMMENTED_CALLS = '''\
from flax import nn


class Block(nn.Module):

  def apply(self, x, train=True, use_residual=1, features=3):
    x = nn.Conv(x, features=4,  # width
                kernel_size=(3, 3),  # window
                )
    x = nn.dropout(x, rate=0.1,  # regularise
                   deterministic=not train)
    y = self.param('w',
                   (3,),  # one per class
                   nn.initializers.zeros)
    x = nn.BatchNorm(x,
                     use_running_average=not train,  # eval: running stats
                     momentum=0.9)
    return nn.Dense(x, features) + y


Big = Block.partial(
    features=4,
    use_residual=2,  # residual on
)


class Net(nn.Module):

  def apply(self, x):
    x = Big(x,
            train=False)  # eval
    return nn.Dense(x,
                    5,  # classes
                    bias=False)  # no bias
'''


def test_comments_inside_rewritten_calls_survive():
  # a comment on a partial's last argument (its closing parenthesis on a
  # line of its own: cold_posterior's test), and one inside a call a rule
  # rebuilt from its plan (nn.dropout -> nn.Dropout): before, both were
  # dropped; each comment is now there exactly once
  out = up(COMMENTED_CALLS)
  for c in ('# width', '# window', '# regularise', '# one per class',
            '# eval: running stats', '# residual on', '# eval', '# classes',
            '# no bias'):
    assert sum(1 for l in out.splitlines()
               if l.rstrip().endswith(c) or f'{c}  #' in l) == 1, (c, out)
  assert 'use_residual=2,  # residual on\n)' in out
  # the call rebuilt from a plan: the comment goes on a line above it
  lines = out.splitlines()
  at = next(i for i, l in enumerate(lines) if 'nn.Dropout(' in l)
  assert lines[at - 1].strip() == '# regularise', out
  compile(out, '<upgraded>', 'exec')
  assert upgrade_source(out)[0] == out


def test_todos_in_rebuilt_statements_report_their_written_line():
  # a field's default (the apply parameter's, walked as a new statement)
  # and a statement an earlier pass of the class rebuilt
  # (``X.partial(...).shared(...)`` normalised first): their TODOs were
  # reported with line None; now the parameter's and the statement's
  src = textwrap.dedent('''\
      from flax import nn


      class M(nn.Module):

        def apply(self, x, features=2):
          return nn.Dense(x, features)


      class N(nn.Module):

        def apply(self, x, attn=nn.SelfAttention):
          m = M.partial(
              zzz=1).shared(name='m')
          return m(x)
      ''')
  _, report = upgrade_source(src)
  lines = {item['why'].split(':')[0]: item['line'] for item in report.left}
  assert lines == {'nn.SelfAttention': 12,
                   '.shared binds call parameters': 13}, report.left


def test_comments_survive_the_command_too(tmp_path):
  # upgrade_paths knows each statement's text as written and walks only
  # those holding a '#' (cst_util.StatementTexts.hashes): the same result
  from flaxlegacy.upgrade import api  # pylint: disable=g-import-not-at-top
  src = tmp_path / 'src'
  src.mkdir()
  (src / 'model.py').write_text(COMMENTED_CALLS)
  status, _ = api.upgrade_paths([str(src)], out=str(tmp_path / 'out'))
  assert status == 0
  from benchmarks import upgrade_comments  # pylint: disable=g-import-not-at-top
  assert upgrade_comments.lost_comments(str(src), str(tmp_path / 'out')) == {}
  out = tmp_path / 'out' / 'model.py'
  assert out.read_text() == up(COMMENTED_CALLS)


def test_comments_of_parameters_that_become_fields_survive():
  out = up(textwrap.dedent('''\
      from flax import nn


      class Block(nn.Module):

        def apply(self, x,  # images
                  features=3,  # width
                  train=True,  # dropout on
                  rate=0.1):
          x = nn.Dense(x, features)
          return nn.dropout(x, rate=rate, deterministic=not train)
      '''))
  assert '  features: int = 3  # width\n' in out, out
  assert '  train: bool = True  # dropout on\n' in out, out
  assert '# images' in out.split('def __call__')[1].split('\n')[0], out
  assert upgrade_source(out)[0] == out


@pytest.mark.parametrize('src', [c[1] for c in CASES + TODO_CASES],
                         ids=[c[0] for c in CASES + TODO_CASES])
def test_idempotent(src):
  once = up(src)
  assert upgrade_source(once)[0] == once


def test_upgraded_code_compiles():
  for _, src, _ in CASES:
    compile(up(src), '<upgraded>', 'exec')


def _cli(*args, env=None):
  return subprocess.run(
      [sys.executable, '-m', 'flaxlegacy', 'upgrade'] + list(args),
      capture_output=True, text=True, cwd=ROOT,
      env=dict(os.environ, PYTHONPATH=ROOT, **(env or {})), check=False)


def _tree(tmp_path):
  src = tmp_path / 'src'
  (src / 'pkg').mkdir(parents=True)
  (src / 'pkg' / 'model.py').write_text(textwrap.dedent('''\
      from flax import nn


      class M(nn.Module):

        def apply(self, x, features=3):
          return nn.Dense(x, features)
      '''))
  (src / 'pkg' / 'broken.py').write_text('def f(:\n  pass\n')
  (src / 'pkg' / 'plain.py').write_text('x = 1\n')
  (src / 'README.txt').write_text('not python\n')
  return src


def test_cli_out_mirrors_src_and_reports(tmp_path):
  src = _tree(tmp_path)
  before = {p: p.read_text() for p in src.rglob('*') if p.is_file()}
  out = tmp_path / 'out'
  p = _cli(str(src), '--out', str(out))
  assert p.returncode == 0, p.stderr
  # SRC untouched, DST mirrors it, non-Python copied
  assert {p: p.read_text() for p in src.rglob('*') if p.is_file()} == before
  assert (out / 'README.txt').read_text() == 'not python\n'
  assert (out / 'pkg' / 'plain.py').read_text() == 'x = 1\n'
  assert 'nn.Dense(self.features)(x)' in (out / 'pkg' / 'model.py').read_text()
  # the syntax error is named with file and line, the rest processed
  assert 'broken.py:1:' in p.stderr and 'syntax error' in p.stderr
  report = json.loads((out / 'upgrade.json').read_text())
  assert report['modules'] == [{'file': os.path.join('pkg', 'model.py'),
                                'class': 'M', 'fields': ['features'],
                                'call': ['x'], 'var_kw': None}]
  assert report['files'][os.path.join('pkg', 'broken.py')]['error']
  assert report['summary']['modules_rewritten'] == 1


def test_cli_diff_exit_codes_and_in_place(tmp_path):
  src = _tree(tmp_path)
  (src / 'pkg' / 'broken.py').unlink()
  before = (src / 'pkg' / 'model.py').read_text()
  p = _cli(str(src), '--diff')
  assert p.returncode == 1, p.stderr
  assert '+    return nn.Dense(self.features)(x)' in p.stdout
  assert (src / 'pkg' / 'model.py').read_text() == before  # wrote nothing
  p = _cli(str(src), '--in-place')
  assert p.returncode == 0, p.stderr
  assert 'linen as nn' in (src / 'pkg' / 'model.py').read_text()
  p = _cli(str(src), '--diff')  # a second run changes nothing
  assert p.returncode == 0 and p.stdout == '', p.stdout


def test_cli_bad_arguments(tmp_path):
  p = _cli(str(tmp_path / 'missing'), '--out', str(tmp_path / 'o'))
  assert p.returncode == 2 and 'no such file or directory' in p.stderr
  src = _tree(tmp_path)
  p = _cli(str(src), '--out', str(src / 'inside'))
  assert p.returncode == 2 and 'lies inside SRC' in p.stderr
  p = _cli(str(src))
  assert p.returncode == 2 and 'one of the arguments' in p.stderr


def test_dotted_flax_nn_prefix():
  out = up('''
      import flax
      class M(flax.nn.Module):
        def apply(self, x):
          return flax.nn.Dense(x, 3, name='d')
      f = flax.nn.Dense.partial(features=2)
      ''')
  assert 'class M(flax.linen.Module):' in out
  assert "flax.linen.Dense(3, name='d')(x)" in out
  assert 'functools.partial(flax.linen.Dense, features=2)' in out
  assert 'flax.nn' not in out
  assert upgrade_source(out)[0] == out


def _corpora():
  yield os.path.join(ROOT, 'examples')
  from tests import conformance  # pylint: disable=g-import-not-at-top
  shared = conformance.shared_dir()
  if shared is not None:
    yield os.path.join(shared, 'conformance')


@pytest.mark.parametrize('corpus', list(_corpora()),
                         ids=lambda p: os.path.basename(p))
def test_corpus_idempotent_and_compiles(corpus, tmp_path):
  """A second run over the upgraded examples / generators changes nothing;
  every comment of theirs is still there (benchmarks/upgrade_comments.py)."""
  import io  # pylint: disable=g-import-not-at-top
  from benchmarks import upgrade_comments  # pylint: disable=g-import-not-at-top
  from flaxlegacy.upgrade import api  # pylint: disable=g-import-not-at-top
  out = tmp_path / 'once'
  status, report = api.upgrade_paths([corpus], out=str(out))
  assert status == 0 and report['summary']['modules_rewritten'] >= 3
  for path in out.rglob('*.py'):
    compile(path.read_text(), str(path), 'exec')
  lost = upgrade_comments.lost_comments(corpus, str(out))
  assert not lost, lost
  buf = io.StringIO()
  status, _ = api.upgrade_paths([str(out)], diff=True, stdout=buf)
  assert (status, buf.getvalue()) == (0, '')


def test_cli_verify_needs_out(tmp_path):
  src = _tree(tmp_path)
  p = _cli(str(src), '--diff', '--verify')
  assert p.returncode == 2 and '--verify needs --out' in p.stderr


def test_split_follows_child_call_parameters():
  """A parameter handed on as a child's call parameter is a call parameter."""
  out, report = upgrade_source(textwrap.dedent('''
      from flax import nn
      class Dec(nn.Module):
        def apply(self, encoded, targets, size=3):
          return nn.Dense(targets, size) + encoded.mean()
      class Net(nn.Module):
        def apply(self, inputs, targets, size=3):
          return Dec(inputs, targets=targets, size=size)
      '''))
  splits = {m['class']: (m['fields'], m['call']) for m in report.modules}
  assert splits == {'Dec': (['size'], ['encoded', 'targets']),
                    'Net': (['size'], ['inputs', 'targets'])}
  assert 'Dec(size=self.size)(inputs, targets=targets)' in out


@pytest.mark.parametrize('src,expected', [
    # legacy: two elements with an iterable first one are (shape, dtype)
    ('[(3, 4)]', [('(3, 4)', None)]),
    ('[((3, 4), jnp.int32)]', [('(3, 4)', 'jnp.int32')]),
    ('[(batch_size, 784)]', [('(batch_size, 784)', None)]),
    ('[(input_shape, jnp.float32)]', [('input_shape', 'jnp.float32')]),
    ('[(x.shape, x.dtype)]', [('x.shape', 'x.dtype')]),
    ("[((1, 28), 'int32'), (2, 3, 4)]", [('(1, 28)', "'int32'"),
                                         ('(2, 3, 4)', None)]),
    ('[(a, b)]', None),  # a shape of two sizes, or a pair: cannot tell
    ('specs', None),
])
def test_init_specs_follow_legacy_parsing(src, expected):
  from flaxlegacy.upgrade import facts  # pylint: disable=g-import-not-at-top
  assert facts.init_specs(src) == expected


def test_ambiguous_init_spec_keeps_todo():
  out = up('''
      from flax import nn
      class M(nn.Module):
        def apply(self, x):
          return nn.Dense(x, 2)
      def f(key, a, b):
        _, params = M.init_by_shape(key, [(a, b)])
        return params
      ''')
  assert '_, params = M.init_by_shape(key, [(a, b)])' in out
  assert 'a spec that could be either' in out


def test_attribute_of_a_layer_result_is_not_legacy_api():
  # nn.Dense(x, 3).sum(-1): `sum` is an attribute of the layer's output,
  # not a legacy name nn.Dense.sum (was a false TODO)
  out = up('''
      from flax import nn
      class M(nn.Module):
        def apply(self, x):
          return nn.Dense(x, 3).sum(-1) + nn.Dense(x, 3).T.mean()
      ''')
  assert 'TODO' not in out, out
  assert ('return nn.Dense(3)(x).sum(-1) + nn.Dense(3)(x).T.mean()'
          in out)
