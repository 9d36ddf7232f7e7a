"""flaxlegacy upgrade: legacy module classes with helper methods
(rules/methods.py) and the removed jax.test_util test helpers
(rules/test_util.py): output source, TODOs where unsure, idempotence, and
numbers (one helper-method class verified against legacy with
FLAXLEGACY=off on the upgraded side)."""

import textwrap

import jax.numpy as jnp
import numpy as np
import pytest

from flaxlegacy.upgrade import upgrade_source
from flaxlegacy.upgrade import verify


def up(src):
  return upgrade_source(textwrap.dedent(src))


# A graph block in the shape of legacy Flax's examples/graph: apply stores
# per-call values on self and calls helper methods that create submodules.
BLOCK = '''
    from flax import nn
    import jax
    import jax.numpy as jnp


    class Block(nn.Module):

      def apply(self, node_x, edge_x, sources, targets, features):
        self.features = features
        self.num_nodes = node_x.shape[0]
        messages = self._messages(node_x, edge_x, sources)
        summed = self._propagate(messages, targets)
        return self._update(node_x, summed)

      def _update(self, node_x, summed):
        x = jnp.concatenate((summed, node_x), axis=1)
        return nn.Dense(x, features=self.features)

      def _messages(self, node_x, edge_x, sources):
        del edge_x
        return nn.Dense(jnp.take(node_x, sources, axis=0), self.features)

      def _propagate(self, messages, targets):
        return self._sum(messages, targets)

      def _sum(self, messages, targets):
        return jax.ops.segment_sum(messages, targets,
                                   num_segments=self.num_nodes)


    class Net(nn.Module):

      def apply(self, node_x, edge_x, sources, targets):
        x = Block(node_x, edge_x, sources, targets, features=4)
        return Block(nn.relu(x), edge_x, sources, targets, features=2)
    '''


def test_helper_methods_rewritten_and_self_attributes_threaded():
  out, report = up(BLOCK)
  assert 'TODO' not in out, out
  assert 'from flax import nn' not in out
  # the field assignment is dropped, the per-call value becomes a local
  assert 'self.features =' not in out and 'self.num_nodes' not in out
  assert '    num_nodes = node_x.shape[0]\n' in out
  # helpers keep their place; legacy layer calls in them are rewritten
  assert 'return nn.Dense(features=self.features)(x)' in out
  assert ('return nn.Dense(self.features, name=\'Dense_0\')'
          '(jnp.take(node_x, sources, axis=0))') not in out
  assert 'nn.Dense(self.features)(jnp.take(node_x, sources, axis=0))' in out
  # num_nodes reaches _sum through _propagate, as keyword-only parameters
  assert 'def _propagate(self, messages, targets, *, num_nodes):' in out
  assert 'return self._sum(messages, targets, num_nodes=num_nodes)' in out
  assert 'def _sum(self, messages, targets, *, num_nodes):' in out
  assert 'num_segments=num_nodes)' in out
  assert ('summed = self._propagate(messages, targets, '
          'num_nodes=num_nodes)') in out
  assert 'def _update(self, node_x, summed):' in out
  # positional arguments of a class with helpers are call parameters
  splits = {m['class']: (m['fields'], m['call']) for m in report.modules}
  assert splits == {
      'Block': (['features'], ['node_x', 'edge_x', 'sources', 'targets']),
      'Net': ([], ['node_x', 'edge_x', 'sources', 'targets'])}
  assert 'Block(features=4)(node_x, edge_x, sources, targets)' in out
  assert upgrade_source(out)[0] == out  # idempotent


def test_auto_names_follow_helper_calls():
  """Legacy counts submodules per instance in the order helpers run."""
  out, _ = up('''
      from flax import nn

      class M(nn.Module):

        def apply(self, x):
          x = nn.Dense(x, 3)
          x = self._conv_then_dense(x)
          return nn.Dense(x, 2)

        def _conv_then_dense(self, x):
          x = nn.Conv(x, 4, (1, 1))
          return nn.Dense(x, 5)
      ''')
  # legacy: Dense_0, Conv_1, Dense_2, Dense_3; linen would count per type
  assert "nn.Dense(3)(x)" in out
  assert "nn.Conv(4, (1, 1), name='Conv_1')(x)" in out
  assert "nn.Dense(5, name='Dense_2')(x)" in out
  assert "nn.Dense(2, name='Dense_3')(x)" in out
  assert 'TODO' not in out


def test_helper_method_class_matches_legacy_numbers(tmp_path):
  """Same parameter tree and outputs (rtol 1e-5, perturbed parameters)."""
  legacy = tmp_path / 'legacy.py'
  legacy.write_text(textwrap.dedent(BLOCK))
  out, report = up(BLOCK)
  upgraded = tmp_path / 'upgraded.py'
  upgraded.write_text(out)
  mods = {m['class']: m for m in report.modules}
  inputs = [((5, 3), 'float32'), None, ((7,), 'int32'), ((7,), 'int32')]
  checks = [dict(class_name=c, inputs=inputs, hyper=h,
                 fields=mods[c]['fields'], call=mods[c]['call'],
                 var_kw=mods[c]['var_kw'])
            for c, h in (('Block', {'features': 3}), ('Net', {}))]
  results = verify.verify_modules(str(legacy), str(upgraded), checks)
  for r in results:
    assert r['status'] == 'ok', r


@pytest.mark.parametrize('name,src,why', [
    # (a module method building an auto-named submodule converts now:
    # test_upgrade_module_methods.py, the compact scope)
    ('helper_assigns_self', '''
        from flax import nn
        class M(nn.Module):
          def apply(self, x):
            return self._h(x)
          def _h(self, x):
            self.n = x.shape[0]
            return nn.Dense(x, self.n)
        ''', 'method _h assigns attributes of self'),
    ('helper_escapes', '''
        from flax import nn
        import jax
        class M(nn.Module):
          def apply(self, x):
            return self._h(x) + jax.tree_util.tree_map(self._h, x)
          def _h(self, x):
            return nn.Dense(x, 2)
        ''', "methods ['_h'] are used other than by a direct"),
    ('name_clash', '''
        from flax import nn
        class M(nn.Module):
          def apply(self, x):
            self.n = x.shape[0]
            n = 3
            return self._h(x) * n
          def _h(self, x):
            return nn.Dense(x, self.n)
        ''', "also uses a local 'n'"),
])
def test_unsure_methods_leave_todo(name, src, why):
  del name
  out, report = up(src)
  assert 'TODO(flaxlegacy upgrade)' in out
  assert any(why in l['why'] for l in report.left), report.left
  assert upgrade_source(out)[0] == out


# -- jax.test_util ----------------------------------------------------------

TEST_FILE = '''
    from absl.testing import absltest
    import jax
    from jax import test_util as jtu
    import jax.numpy as jnp


    class MyTest(jtu.JaxTestCase):

      def test_close(self):
        self.assertAllClose(jnp.ones(3), jnp.ones(3), check_dtypes=False)


    class MoreTest(MyTest):

      def test_more(self):
        self.assertAllClose({'a': 1.}, {'a': 1.})
        self.assertArraysAllClose(jnp.zeros(2), jnp.zeros(2), atol=1e-3)


    if __name__ == '__main__':
      absltest.main()
    '''


def test_jax_test_case_rewritten():
  out, report = up(TEST_FILE)
  assert 'test_util' not in out.replace('jax.test_util.JaxTestCase', '')
  assert 'jtu' not in out
  assert 'from absl.testing import parameterized\n' in out
  assert 'class MyTest(parameterized.TestCase):' in out
  assert 'class MoreTest(MyTest):' in out
  assert ('_assert_all_close(jnp.ones(3), jnp.ones(3), check_dtypes=False)'
          in out)
  assert "_assert_all_close({'a': 1.}, {'a': 1.})" in out
  # the array check of JaxTestCase: the same keywords, the same leaf check
  assert '_assert_all_close(jnp.zeros(2), jnp.zeros(2), atol=1e-3)' in out
  assert out.count('def _assert_all_close(') == 1
  assert not report.left
  assert upgrade_source(out)[0] == out  # idempotent
  compile(out, '<upgraded>', 'exec')


def test_still_public_test_util_kept_and_removed_helpers_flagged():
  out, report = up('''
      from jax import test_util as jtu

      class T(jtu.JaxTestCase):

        def test_grads(self):
          jtu.check_grads(f, (1.,), order=2)
          x = self.rng().randn(3)
          jtu.rand_default()
      ''')
  assert 'from jax import test_util as jtu' in out  # check_grads exists
  assert 'class T(parameterized.TestCase):' in out
  whys = [l['why'] for l in report.left]
  assert any('self.rng came from the removed' in w for w in whys), whys
  assert any('jax.test_util.rand_default was removed' in w for w in whys)
  assert not any('check_grads' in w for w in whys)
  assert upgrade_source(out)[0] == out


def _helper():
  out, _ = up(TEST_FILE)
  start = out.index('def _assert_all_close(')
  end = out.index('\n\n', out.index('err_msg=err_msg)', start))
  scope = {}
  exec(out[start:end], scope)  # pylint: disable=exec-used
  return scope['_assert_all_close']


def test_written_assert_all_close_has_legacy_meaning():
  check = _helper()
  a = np.linspace(1., 2., 5, dtype=np.float32)
  # float32: atol = rtol = 1e-6 by default
  check(jnp.asarray(a), a * (1 + 5e-7))
  with pytest.raises(AssertionError):
    check(jnp.asarray(a), a * (1 + 1e-5))
  check(jnp.asarray(a), a * (1 + 1e-5), atol=0, rtol=1e-4)
  # dtypes: compared as JAX stores them (float64 input -> float32)
  check(jnp.asarray(a), a.astype(np.float64))
  with pytest.raises(AssertionError, match='dtypes differ'):
    check(jnp.asarray(a), a.astype(np.int32))
  check(jnp.asarray([1., 2.]), np.array([1, 2], np.int32), check_dtypes=False)
  # integers: exact
  with pytest.raises(AssertionError):
    check(np.array([1, 2]), np.array([1, 3]), check_dtypes=False)
  # trees: leaf by leaf, same structure and shapes
  check({'w': a, 'b': [a, a]}, {'w': a, 'b': [a, a]})
  with pytest.raises(AssertionError, match='tree structures differ'):
    check({'w': a}, {'v': a})
  with pytest.raises(AssertionError, match='shapes differ'):
    check(a, a[:3])
