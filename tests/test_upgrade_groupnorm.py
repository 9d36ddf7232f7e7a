"""flaxlegacy upgrade: legacy ``nn.GroupNorm`` -> the linen GroupNorm
flaxlegacy ships (flaxlegacy.migrate.upgraded_layers), which keeps legacy's
``(1, ..., 1, C)`` parameters and numbers (spec legacy-nn.md §3.10).
Verified against the legacy layer with ``FLAXLEGACY=off`` on the upgraded
side."""

import json
import os
import subprocess
import sys
import textwrap

from flaxlegacy.upgrade import upgrade_paths
from flaxlegacy.upgrade import upgrade_source
from flaxlegacy.upgrade import verify

SRC = '''
    from flax import nn
    import jax.numpy as jnp


    class Block(nn.Module):

      def apply(self, x, groups=2):
        x = nn.Conv(x, 4, (3, 3))
        x = nn.GroupNorm(x, num_groups=groups)
        y = nn.GroupNorm(x, num_groups=None, group_size=1, bias=False,
                         epsilon=1e-3)
        return nn.Dense(x + y, 3)
    '''


def test_group_norm_becomes_the_shipped_layer():
  out, report = upgrade_source(textwrap.dedent(SRC))
  assert 'TODO' not in out, out
  assert 'from flaxlegacy.migrate import upgraded_layers\n' in out
  assert ("upgraded_layers.GroupNorm(num_groups=self.groups, "
          "name='GroupNorm_1')(x)") in out
  assert ('upgraded_layers.GroupNorm(num_groups=None, group_size=1, '
          "use_bias=False,") in out
  assert [r['shipped'] for r in report.rewritten if r.get('shipped')] == [
      'flaxlegacy.migrate.upgraded_layers.GroupNorm'] * 2
  again, _ = upgrade_source(out)
  assert again == out


def test_group_norm_numbers_and_parameter_shapes_match_legacy(tmp_path):
  src = tmp_path / 'src'
  src.mkdir()
  (src / 'block.py').write_text(textwrap.dedent(SRC))
  status, _ = upgrade_paths([str(src)], out=str(tmp_path / 'out'))
  assert status == 0
  with open(tmp_path / 'out' / 'upgrade.json') as f:
    assert json.load(f)['shipped_modules'] == [
        'flaxlegacy.migrate.upgraded_layers.GroupNorm']
  res = verify.verify_module(
      str(src / 'block.py'), str(tmp_path / 'out' / 'block.py'), 'Block',
      [((2, 5, 5, 3), 'float32')], {'groups': 2}, ['groups'], [], None)
  # 'tree': the shipped layer's scale/bias have the legacy (1, 1, 1, 4)
  assert res['status'] == 'ok', res
  assert res['tree'] is True


def test_shipped_group_norm_runs_with_the_layer_off():
  code = textwrap.dedent('''
      import jax, jax.numpy as jnp
      from flaxlegacy.migrate import upgraded_layers
      import sys
      m = upgraded_layers.GroupNorm(num_groups=2)
      v = m.init(jax.random.PRNGKey(0), jnp.ones((1, 3, 4)))
      print(jax.tree_util.tree_map(jnp.shape, v['params']))
      try:
        upgraded_layers.GroupNorm(num_groups=2, group_size=2).init(
            jax.random.PRNGKey(0), jnp.ones((1, 4)))
      except ValueError as e:
        print('error:', e)
      assert not any(k.startswith(('flax.nn', 'flaxlegacy.nn'))
                     for k in sys.modules)
      ''')
  env = dict(os.environ, FLAXLEGACY='off', JAX_PLATFORMS='cpu')
  p = subprocess.run([sys.executable, '-c', code], env=env,
                     capture_output=True, text=True, check=False)
  assert p.returncode == 0, p.stderr
  assert "{'bias': (1, 1, 4), 'scale': (1, 1, 4)}" in p.stdout
  assert ('error: Either `num_groups` or `group_size` should be specified, '
          'but not both of them.') in p.stdout


HELPERS = '''
    from flax import nn
    from jax import lax


    class DepthwiseConv(nn.Module):

      def apply(self, x, axis=-1):
        dn = nn.linear._conv_dimension_numbers(x.shape)
        axes = nn.normalization._absolute_dims(x.ndim, (axis,))
        k = self.param('kernel', (3, 1, x.shape[-1]),
                       nn.initializers.lecun_normal())
        y = lax.conv_general_dilated(x, k, (1,), 'SAME',
                                     dimension_numbers=dn,
                                     feature_group_count=x.shape[-1])
        return y - y.mean(axes, keepdims=True)
    '''


def test_legacy_private_helpers_become_the_shipped_functions(tmp_path):
  out, report = upgrade_source(textwrap.dedent(HELPERS))
  assert 'TODO' not in out, out
  assert 'dn = upgraded_layers.conv_dimension_numbers(x.shape)' in out
  assert 'axes = upgraded_layers.absolute_dims(x.ndim, (self.axis,))' in out
  assert sorted(r['shipped'] for r in report.rewritten if r.get('shipped')) == [
      'flaxlegacy.migrate.upgraded_layers.absolute_dims',
      'flaxlegacy.migrate.upgraded_layers.conv_dimension_numbers']
  src = tmp_path / 'src'
  src.mkdir()
  (src / 'dw.py').write_text(textwrap.dedent(HELPERS))
  status, _ = upgrade_paths([str(src)], out=str(tmp_path / 'out'))
  assert status == 0
  res = verify.verify_module(
      str(src / 'dw.py'), str(tmp_path / 'out' / 'dw.py'), 'DepthwiseConv',
      [((2, 7, 4), 'float32')], {}, ['axis'], [], None)
  assert res['status'] == 'ok', res


def test_shipped_helpers_equal_the_legacy_ones():
  from flaxlegacy.migrate import upgraded_layers  # pylint: disable=g-import-not-at-top
  from flaxlegacy.nn import linear, normalization  # pylint: disable=g-import-not-at-top
  for shape in ((2, 5), (2, 5, 3), (2, 4, 4, 3), (1, 2, 3, 4, 5)):
    assert (upgraded_layers.conv_dimension_numbers(shape)
            == linear._conv_dimension_numbers(shape))  # pylint: disable=protected-access
    for dims in ((-1,), (0, -2), (1, 2)):
      if max(abs(d) for d in dims) < len(shape):
        assert (upgraded_layers.absolute_dims(len(shape), dims)
                == normalization._absolute_dims(len(shape), dims))  # pylint: disable=protected-access
