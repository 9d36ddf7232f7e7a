"""flaxlegacy upgrade: a local partial of a layer called in a plain helper
(rules/partial_calls.py), and ``nn.Model(None, params)``'s apply function.

Research code builds its normalisation in helpers the module calls::

    def activation(x, train, name=''):
      batch_norm = nn.BatchNorm.partial(use_running_average=not train, ...)
      x = batch_norm(x, name=name)

The partial became ``functools.partial(nn.BatchNorm, ...)`` while the call
stayed ``batch_norm(x, name=name)``: ``x`` landed in ``use_running_average``
(TypeError, no TODO).  Both change together now, or both get a TODO.
Upgraded code runs with FLAXLEGACY=off (flaxlegacy.upgrade.verify) and is
compared with the legacy code under the layer.
"""

import textwrap

from flaxlegacy.upgrade import upgrade_paths
from flaxlegacy.upgrade import upgrade_source
from flaxlegacy.upgrade import verify

HELPERS = '''\
    from flax import nn
    import jax


    def activation(x, train, apply_relu=True, name=''):
      batch_norm = nn.BatchNorm.partial(
          use_running_average=not train, momentum=0.9, epsilon=1e-5)
      x = batch_norm(x, name=name)
      if apply_relu:
        x = jax.nn.relu(x)
      return x


    def dense(x, features, name):
      layer = nn.Dense.partial(bias=False)
      return layer(x, features, name=name,
                   kernel_init=nn.initializers.lecun_normal())


    class Block(nn.Module):

      def apply(self, x, train=True):
        x = dense(x, 6, 'fc')
        x = activation(x, train, name='bn_1')
        x = nn.Dense(x, 4)
        return activation(x, train, apply_relu=False, name='bn_2')
    '''


def up(src):
  return upgrade_source(textwrap.dedent(src))[0]


def test_partial_and_its_calls_change_together():
  out = up(HELPERS)
  flat = ' '.join(out.split())
  assert 'batch_norm = functools.partial(nn.BatchNorm,' in flat, out
  assert 'x = batch_norm(name=name)(x)' in flat, out
  assert 'layer = functools.partial(nn.Dense, use_bias=False)' in flat, out
  assert ('return layer(features=features, name=name, '
          'kernel_init=nn.initializers.lecun_normal())(x)' in flat), out
  assert 'TODO' not in out, out


def test_helper_numbers_match_legacy(tmp_path):
  d = tmp_path / 'src'
  d.mkdir()
  (d / 'model.py').write_text(textwrap.dedent(HELPERS))
  status, _ = upgrade_paths([str(d)], out=str(tmp_path / 'out'))
  assert status == 0
  checks = [dict(class_name='Block', inputs=[((5, 3), 'float32')],
                 hyper={'train': train}, fields=['train'], call=[])
            for train in (True, False)]
  res = verify.verify_modules(str(d / 'model.py'),
                              str(tmp_path / 'out' / 'model.py'), checks)
  assert [r['status'] for r in res] == ['ok', 'ok'], res


def _todo_lines(out):
  return [l.strip() for l in out.splitlines() if 'TODO(flaxlegacy' in l]


def test_call_without_a_name_gets_a_todo_on_both():
  out = up('''\
      from flax import nn


      def norm(x, train):
        bn = nn.BatchNorm.partial(use_running_average=not train)
        return bn(x)
      ''')
  todos = _todo_lines(out)
  assert len(todos) == 2 and 'no name=' in todos[0], out
  # neither is rewritten: the partial stays with its call
  assert 'bn = nn.BatchNorm.partial(' in out, out
  assert 'return bn(x)' in out, out


def test_unknown_keyword_or_two_assignments_get_a_todo():
  out = up('''\
      from flax import nn


      def proj(x, name):
        d = nn.Dense.partial(features=3)
        return d(x, name=name, nonsense=1)


      def pick(x, wide, name):
        d = nn.Dense.partial(features=3)
        if wide:
          d = nn.Dense.partial(features=8)
        return d(x, name=name)
      ''')
  assert 'nonsense= is not a parameter of legacy Dense' in out, out
  assert 'it is assigned more than once' in out, out
  assert 'functools.partial(nn.Dense' not in out, out


def test_local_partial_passed_on_is_not_this_rules():
  out = up('''\
      from flax import nn


      def make(features):
        conv = nn.Conv.partial(kernel_size=(3, 3))
        return conv
      ''')
  assert 'conv = functools.partial(nn.Conv, kernel_size=(3, 3))' in out, out
  assert 'TODO' not in out, out


def test_model_of_no_module_has_no_apply_function():
  """``nn.Model(None, params)`` (a bag of parameters for an optimizer):
  the TrainState's apply_fn is None, never ``None().apply``."""
  out = up('''\
      from flax import nn
      from flax import optim


      def meta(norms):
        meta_model = nn.Model(None, norms)
        meta_opt = optim.Momentum(0.1, 0.9).create(meta_model)
        return meta_opt
      ''')
  assert 'None()' not in out, out
  assert 'apply_fn=None,' in out, out


def test_shared_and_call_of_a_partial_never_left_silently():
  # The partial becomes functools.partial, which has no .shared / .call:
  # each such use keeps a TODO (outside a module definition, and a partial
  # held by a name inside one); .shared of a layer in a body is rewritten.
  src = textwrap.dedent('''\
      from flax import nn

      layer = nn.Dense.partial(features=2)
      shared_layer = layer.shared(name='x')


      def f():
        return nn.Conv.partial(features=3).shared(name='c')


      def k():
        return nn.Dense.partial(features=3).call


      class M(nn.Module):

        def apply(self, x):
          e = layer.shared(name='e')
          d = nn.Dense.partial(features=3).shared(name='d')
          return e(d(d(x)))
  ''')
  new, report = upgrade_source(src)
  lines = new.splitlines()
  for use in ("shared_layer = layer.shared(name='x')",
              "return functools.partial(nn.Conv, features=3).shared(name='c')",
              'return functools.partial(nn.Dense, features=3).call',
              "e = layer.shared(name='e')"):
    i = next(i for i, l in enumerate(lines) if l.strip() == use)
    assert lines[i - 1].strip().startswith('# TODO(flaxlegacy upgrade)'), (
        use, new)
  assert "d = nn.Dense(features=3, name='d')" in new
  whys = [e['why'] for e in report.left]
  assert sum('.shared' in w for w in whys) == 3 and sum(
      '.call' in w for w in whys) == 1, whys
  i = lines.index("    d = nn.Dense(features=3, name='d')")
  assert 'TODO' not in lines[i - 1]
