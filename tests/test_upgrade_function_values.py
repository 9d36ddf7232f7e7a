"""flaxlegacy upgrade: a value that holds a legacy layer in some runs and a
function (a lambda, a def, a Python builtin) in others, called
legacy-style in a module body: a local, a helper's return, a
hyper-parameter whose default is a module class.

Research code writes ``norm = nn.BatchNorm.partial(...) if bn else (lambda
x, *a, **k: x)`` and calls ``norm(y, name='norm1')``.  Linen's split of the
layer (``norm(name='norm1')(y)``) would crash where the value is the
function: such a call is split at run time by what the value holds
(``_legacy_layer_call``, rules/called_layers.py), and the upgraded program
(FLAXLEGACY=off) gives the legacy numbers and parameter names for both
choices.  A value the facts do not know next to a layer keeps a TODO.
"""

import textwrap

import numpy as np

from flaxlegacy.upgrade import upgrade_source
from tests import upgrade_run

TODO = '# TODO(flaxlegacy upgrade)'

BLOCK = '''
import jax.numpy as jnp
from flax import nn


def waves(key, shape, dtype=jnp.float32):
  del key
  n = 1
  for d in shape:
    n *= d
  return jnp.sin(jnp.arange(n, dtype=dtype) * 0.7).reshape(shape) * 0.3


class Block(nn.Module):

  def apply(self, x, bn=True, train=True):
    norm = nn.BatchNorm.partial(use_running_average=not train,
                                momentum=0.9) if bn else (
                                    lambda x, *a, **k: x)
    act = nn.Dense.partial(features=3, kernel_init=waves) if bn else abs
    y = nn.Dense(x, 4, kernel_init=waves)
    y = norm(y, name='norm1')
    y = nn.Dense(y, 4, kernel_init=waves)
    y = norm(y)
    return act(y)


def get_norm(bn, train):
  if bn:
    return nn.BatchNorm.partial(use_running_average=not train)
  return lambda x, **k: x


class HelperBlock(nn.Module):

  def apply(self, x, bn=True, train=True):
    norm = get_norm(bn, train)
    y = nn.Dense(x, 4, kernel_init=waves)
    y = norm(y, name='n1')
    y = nn.Dense(y, 4, kernel_init=waves)
    return norm(y)


class ScaleNorm(nn.Module):

  def apply(self, x, eps=1e-6):
    g = self.param('g', (x.shape[-1],), waves)
    return g * x / (jnp.abs(x).mean() + eps)


class ShiftNorm(nn.Module):

  def apply(self, x, shift=0.5, scale=2.0):
    b = self.param('b', (x.shape[-1],), waves)
    return (x + b + shift) * scale


def halve(x, **kwargs):
  del kwargs
  return x / 2


class FieldBlock(nn.Module):

  def apply(self, x, norm=ScaleNorm):
    y = nn.Dense(x, 4, kernel_init=waves)
    y = norm(y, name='n1')
    y = nn.Dense(y, 4, kernel_init=waves)
    return norm(y)


class Net(nn.Module):

  def apply(self, x, kind='scale'):
    if kind == 'scale':
      return FieldBlock(x)
    if kind == 'shift':
      return FieldBlock(x, norm=ShiftNorm.partial(scale=3.0))
    if kind == 'halve':
      return FieldBlock(x, norm=halve)
    return FieldBlock(x, norm=lambda x, **k: x)


class LambdaDefault(nn.Module):

  def apply(self, x, act=lambda y, **k: y):
    y = nn.Dense(x, 4, kernel_init=waves)
    return act(y)


class Net2(nn.Module):

  def apply(self, x, dense=False):
    if dense:
      return LambdaDefault(x, act=nn.Dense.partial(features=2,
                                                   kernel_init=waves))
    return LambdaDefault(x)
'''

RUN = '''
import json
import jax
import jax.numpy as jnp
import numpy as np
from flax import nn
import block

x = jnp.cos(jnp.arange(2 * 5.0)).reshape((2, 5))
out = {}
models = {}
for bn in (True, False):
  models[f'block/{bn}'] = block.Block.partial(bn=bn)
  models[f'helper/{bn}'] = block.HelperBlock.partial(bn=bn)
  models[f'default/{bn}'] = block.Net2.partial(dense=bn)
for kind in ('scale', 'shift', 'halve', 'lambda'):
  models[f'field/{kind}'] = block.Net.partial(kind=kind)
for k, m in models.items():
  with nn.stateful() as state:
    y, params = m.init(jax.random.PRNGKey(0), x)
  flat = jax.tree_util.tree_flatten_with_path(params)[0]
  out[k] = {
      'y': np.asarray(y).tolist(),
      'paths': sorted(jax.tree_util.keystr(p) for p, _ in flat)}
print(json.dumps(out))
'''


def test_layer_or_function_is_called_at_run_time():
  new, _ = upgrade_source(textwrap.dedent(BLOCK))
  assert TODO not in new, new
  # never linen's split of the layer (it would call the lambda / abs with
  # keywords and no input)
  assert "norm(name='norm1')" not in new, new
  assert "y = _legacy_layer_call(norm, (), None, y, name='norm1')" in new
  assert 'y = _legacy_layer_call(norm, (), legacy_autoname, y)' in new
  assert 'return _legacy_layer_call(act, (), legacy_autoname, y)' in new
  # a helper returning a layer's partial or a lambda
  assert "y = _legacy_layer_call(norm, (), None, y, name='n1')" in new
  # a hyper-parameter whose default is a module class, given classes of
  # different fields and functions
  assert ("y = _legacy_layer_call(self.norm, (), None, y, name='n1')"
          in new), new
  assert 'return _legacy_layer_call(self.norm, (), legacy_autoname, y)' in (
      new)
  assert '_legacy_module_call' not in new, new
  # a hyper-parameter whose default is a lambda, given a layer
  assert 'return _legacy_layer_call(self.act, (), legacy_autoname, y)' in (
      new)


def test_layer_or_function_gives_the_legacy_numbers(tmp_path):
  """Both choices give the legacy outputs and parameter names
  (deterministic initializers), exactly (measured: identical floats)."""
  src, out, _ = upgrade_run.upgrade_dir(tmp_path, {'block.py': BLOCK,
                                                   'run.py': RUN})
  run = (out / 'run.py').read_text()
  assert TODO not in run and TODO not in (out / 'block.py').read_text()
  legacy = upgrade_run.run_json(src, RUN, off=False)
  upgraded = upgrade_run.run_json(out, run, off=True)
  assert set(legacy) == set(upgraded) == {
      'block/True', 'block/False', 'helper/True', 'helper/False',
      'default/True', 'default/False',
      'field/scale', 'field/shift', 'field/halve', 'field/lambda'}
  for k, a in legacy.items():
    b = upgraded[k]
    assert b['paths'] == a['paths'], k
    np.testing.assert_allclose(b['y'], a['y'], rtol=1e-6, atol=1e-6,
                               err_msg=k)
  # the choices differ (the comparison is not vacuous), the auto-names too:
  # the norm and the act take numbers only where they are modules
  assert legacy['block/True']['y'] != legacy['block/False']['y']
  assert "['BatchNorm_2']['scale']" in legacy['block/True']['paths']
  assert "['Dense_3']['kernel']" in legacy['block/True']['paths']
  assert "['Dense_1']['kernel']" in legacy['block/False']['paths']
  assert "['BatchNorm_2']['scale']" in legacy['helper/True']['paths']
  assert "['Dense_1']['kernel']" in legacy['helper/False']['paths']
  assert "['FieldBlock_0']['ScaleNorm_2']['g']" in legacy['field/scale'][
      'paths']
  assert "['FieldBlock_0']['ShiftNorm_2']['b']" in legacy['field/shift'][
      'paths']
  assert "['FieldBlock_0']['Dense_1']['kernel']" in legacy['field/halve'][
      'paths']
  assert "['LambdaDefault_0']['Dense_1']['kernel']" in legacy[
      'default/True']['paths']
  assert len({str(v) for v in legacy.values()}) == len(legacy)


def test_unknown_value_next_to_a_layer_keeps_a_todo():
  src = BLOCK.replace('(\n                                    lambda x, *a, **k: x)',
                      'somelib.identity').replace(
                          'from flax import nn',
                          'from flax import nn\nimport somelib')
  assert 'somelib.identity' in src
  new, _ = upgrade_source(textwrap.dedent(src))
  assert (TODO + ": 'norm': it holds a legacy module in some runs and "
          'something else (ext) in others') in new, new
  assert "norm(name='norm1')" not in new, new
