"""Legacy layers named through their submodule (``nn.linear.Dense``,
``nn.normalization.BatchNorm``, ``nn.recurrent.GRUCell``,
``nn.attention.SelfAttention``, ``flax.nn.pooling.max_pool``): legacy
``flax.nn`` re-exported them, so each is the layer itself.  Before, every
such call kept two TODOs ("no certain linen rewrite here") and the legacy
call as written."""

import pytest

from flaxlegacy.upgrade import upgrade_source
from tests import upgrade_run

TODO = 'TODO(flaxlegacy upgrade)'

SRC = '''
import flax
from flax import nn


class Block(nn.Module):

  def apply(self, x, carry, train=False):
    y = nn.linear.Conv(x, 4, (3, 3), padding='SAME')
    y = nn.normalization.GroupNorm(y, num_groups=2)
    y = nn.normalization.BatchNorm(y, use_running_average=not train,
                                   momentum=0.9)
    y = flax.nn.pooling.max_pool(y, (2, 2), strides=(2, 2))
    y = nn.activation.relu(y)
    y = y.reshape((y.shape[0], -1, y.shape[-1]))
    y = nn.linear.DenseGeneral(y, 6)
    y = nn.normalization.LayerNorm(y)
    z = nn.attention.SelfAttention(y, num_heads=2, causal_mask=True)
    new_carry, out = nn.recurrent.GRUCell(carry, z[:, 0])
    return nn.linear.Dense(out, 3), new_carry
'''


def test_submodule_names_are_the_layers():
  out, report = upgrade_source(SRC)
  assert TODO not in out, out
  assert not report.left
  for legacy in ('(x, 4, (3, 3)', '(y, num_groups=2)', '(out, 3)'):
    assert legacy not in out, out
  assert "nn.linear.Conv(4, (3, 3), padding='SAME')(x)" in out, out
  assert 'legacy_cells.GRUCell(' in out
  assert 'MultiHeadDotProductAttention(num_heads=2' in out


def test_other_submodule_names_keep_their_todo():
  """``nn.utils.CallStack`` is no re-export of ``nn``: unchanged, as
  before (its TODO)."""
  out, _ = upgrade_source('''
from flax import nn


class Block(nn.Module):

  def apply(self, x):
    stack = nn.utils.CallStack()
    return nn.linear.Dense(x, 3)
''')
  assert f'{TODO}: nn.utils.CallStack' in out, out
  assert 'nn.linear.Dense(3)(x)' in out, out


@pytest.mark.slow
def test_submodule_names_verify(tmp_path):
  result = upgrade_run.verify_source(tmp_path, SRC, 'Block',
                                     [((2, 4, 4, 3), 'float32'), ((2, 6), 'float32')])
  assert result['status'] == 'ok', result


def test_legacy_nn_reached_through_another_modules_import(tmp_path):
  """``modules.nn.attention.dot_product_attention`` in a file that imports
  the codebase's ``modules`` (whose ``nn`` is legacy flax.nn; linen after
  the upgrade): legacy's function, shipped; a name linen has alike stays;
  any other keeps a TODO.  Before, none was rewritten and none had a TODO:
  linen's dot_product_attention refused legacy's ``axis=`` at run time
  (protein_lm's tagging test)."""
  _, out, report = upgrade_run.upgrade_dir(tmp_path, {
      'pkg/__init__.py': '',
      'pkg/modules.py': 'from flax import nn\n\n\n'
                        'class D(nn.Module):\n\n'
                        '  def apply(self, x):\n'
                        '    return nn.Dense(x, 2)\n',
      'pkg/user.py': 'import flax\nfrom pkg import modules\n\n\n'
                     'def attn(q, k, v, **kw):\n'
                     '  return modules.nn.attention.dot_product_attention('
                     'q, k, v, **kw)\n\n\n'
                     'def other(x):\n'
                     '  return modules.nn.relu(modules.nn.utils.CallStack())\n'})
  text = (out / 'pkg' / 'user.py').read_text()
  assert 'return legacy_dot_product_attention(q, k, v, **kw)' in text, text
  whys = [e['why'] for e in report['files']['pkg/user.py']['left']]
  assert whys == ["modules.nn.utils.CallStack: legacy flax.nn reached "
                  "through another module's import of it (linen there now): "
                  'no certain rewrite here'], (whys, text)
