"""flaxlegacy upgrade: plain functions that build layers for module bodies
(rules/layer_functions.py), and the auto-names of a module alias called
through another file (rules/name_plan.py).

Both shapes are from transformer research code of 2020 (long-range-arena):
every encoder ends in a shared ``classifier_head(encoded, ...)`` function
that calls ``nn.Dense(encoded, n, name='mlp')``, and the attention of a
block is ``attention_file.SelfAttention(x, ...)`` where ``SelfAttention =
Attention.partial(inputs_kv=None)``, auto-named ``Attention_1`` by legacy
Flax.  Upgraded, they run with the layer off and give the legacy tree and
numbers (deterministic initializers: linen derives parameter keys apart).
"""

import numpy as np

from tests import upgrade_run

TODO = '# TODO(flaxlegacy upgrade)'

COMMON = '''
import jax.numpy as jnp
from flax import nn


def waves(key, shape, dtype=jnp.float32):
  # deterministic: legacy and linen derive submodule keys apart
  del key
  n = 1
  for d in shape:
    n *= d
  return jnp.cos(jnp.arange(n, dtype=dtype) * 0.7).reshape(shape)


def classifier_head(encoded, num_classes, mlp_dim, pooling='MEAN'):
  if pooling == 'MEAN':
    encoded = jnp.mean(encoded, axis=1)
  else:
    encoded = encoded[:, 0]
  encoded = nn.Dense(encoded, mlp_dim, kernel_init=waves, name='mlp')
  encoded = nn.relu(encoded)
  return nn.Dense(encoded, num_classes, kernel_init=waves, name='logits')
'''

ATTENTION = '''
import jax.numpy as jnp
from flax import nn

import common


class Attention(nn.Module):

  def apply(self, inputs_q, inputs_kv, features=4):
    if inputs_kv is None:
      inputs_kv = inputs_q
    q = nn.Dense(inputs_q, features, kernel_init=common.waves, name='query')
    k = nn.Dense(inputs_kv, features, kernel_init=common.waves, name='key')
    w = jnp.einsum('bqf,bkf->bqk', q, k)
    return jnp.einsum('bqk,bkf->bqf', nn.softmax(w), inputs_kv)


SelfAttention = Attention.partial(inputs_kv=None)
'''

MODEL = '''
from flax import nn

import attention
import common


class Block(nn.Module):

  def apply(self, x):
    y = nn.LayerNorm(x)
    y = attention.SelfAttention(y, features=x.shape[-1])
    return x + nn.Dense(y, x.shape[-1], kernel_init=common.waves)


class Encoder(nn.Module):

  def apply(self, x, num_classes=3):
    x = Block(x, name='block')
    return common.classifier_head(x, num_classes, 5)


class DualEncoder(nn.Module):

  def apply(self, x1, x2, num_classes=2):
    x = Block(x1, name='block') + Block(x2, name='block2')
    return common.classifier_head(x, num_classes, 6, pooling='CLS')
'''

RUN = '''
import json
import jax
import jax.numpy as jnp
import numpy as np
from flax import nn
import model

x = jnp.cos(jnp.arange(24.0)).reshape((2, 3, 4))
out = {}
with nn.stochastic(jax.random.PRNGKey(1)):
  for name, cls, args in [('enc', model.Encoder, (x,)),
                          ('dual', model.DualEncoder, (x, x[:, ::-1]))]:
    y, params = cls.init(jax.random.PRNGKey(0), *args)
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    out[name] = {'y': np.asarray(y).tolist(),
                 'paths': sorted(jax.tree_util.keystr(p) for p, _ in flat)}
print(json.dumps(out))
'''

UPGRADED_RUN = RUN.replace('from flax import nn\n', '').replace(
    "with nn.stochastic(jax.random.PRNGKey(1)):\n  for", "if True:\n  for"
).replace(
    '    y, params = cls.init(jax.random.PRNGKey(0), *args)\n',
    '    y, v = cls().init_with_output(jax.random.PRNGKey(0), *args)\n'
    '    params = v[\'params\']\n')

FILES = {'common.py': COMMON, 'attention.py': ATTENTION, 'model.py': MODEL}


def test_layer_function_and_alias_upgraded(tmp_path):
  src, out, report = upgrade_run.upgrade_dir(tmp_path, FILES)
  common = (out / 'common.py').read_text()
  assert TODO not in common, common
  assert "nn.Dense(mlp_dim, kernel_init=waves, name='mlp')(encoded)" in common
  model = (out / 'model.py').read_text()
  assert "name='Attention_1'" in model, model
  assert TODO not in model, model
  legacy = upgrade_run.run_json(src, RUN, off=False)
  upgraded = upgrade_run.run_json(out, UPGRADED_RUN, off=True,
                                  legacy_stream=True)
  for name in ('enc', 'dual'):
    assert upgraded[name]['paths'] == legacy[name]['paths']
    np.testing.assert_allclose(upgraded[name]['y'], legacy[name]['y'],
                               rtol=1e-6, atol=1e-6)
  assert any('Attention_1' in p for p in legacy['enc']['paths'])
  assert any('/mlp/' in p or "['mlp']" in p for p in legacy['enc']['paths'])


def test_layer_function_called_outside_module_bodies_keeps_todo(tmp_path):
  files = dict(FILES)
  files['program.py'] = '''
import jax.numpy as jnp
import common

def head_outside(x):
  return common.classifier_head(x, 3, 5)
'''
  _, out, _ = upgrade_run.upgrade_dir(tmp_path, files)
  common = (out / 'common.py').read_text()
  assert TODO in common and 'nn.Dense(encoded, mlp_dim' in common, common


def test_layer_function_with_auto_named_layers(tmp_path):
  # legacy numbered the unnamed Dense on the calling body's counter: the
  # calling bodies run in a counter frame and the function
  # draws from it (rules/autoname_stack.py); it kept a TODO before
  files = dict(FILES)
  files['common.py'] = COMMON.replace(", name='logits')", ')')
  src, out, _ = upgrade_run.upgrade_dir(tmp_path, files)
  common = (out / 'common.py').read_text()
  assert TODO not in common, common
  assert 'legacy_names.autoname_counter()' in common, common
  assert '@legacy_names.autoname_frame' in (out / 'model.py').read_text()
  legacy = upgrade_run.run_json(src, RUN, off=False)
  upgraded = upgrade_run.run_json(out, UPGRADED_RUN, off=True,
                                  legacy_stream=True)
  for name in ('enc', 'dual'):
    assert upgraded[name]['paths'] == legacy[name]['paths']
    np.testing.assert_allclose(upgraded[name]['y'], legacy[name]['y'],
                               rtol=1e-6, atol=1e-6)
  for name in ('enc', 'dual'):
    assert any(p.startswith("['Dense_0']") for p in legacy[name]['paths'])


# A function that makes module references for module bodies (a conv chosen
# by configuration, then ``.partial`` of the choice) is called only from
# ``apply`` bodies too, but builds no layer: it is the partial rules', and
# its ``.partial`` must not be left as it was (linen classes have none).
PARTIAL_FACTORY = '''
import jax.numpy as jnp
from flax import nn


def waves(key, shape, dtype=jnp.float32):
  del key
  n = 1
  for d in shape:
    n *= d
  return jnp.cos(jnp.arange(n, dtype=dtype) * 0.7).reshape(shape)


class Scaled(nn.Module):

  def apply(self, x, features, scale=1.0, bias=True):
    return scale * nn.Dense(x, features, bias=bias, kernel_init=waves,
                            name='dense')


def get_layer(kind, scale):
  if kind == 'plain':
    layer = Scaled
  else:
    layer = Scaled.partial(bias=False)
  layer = layer.partial(scale=scale)
  return layer


class Net(nn.Module):

  def apply(self, x, kind='plain'):
    layer = get_layer(kind, 2.0)
    return layer(x, 3, name='first')
'''

FACTORY_RUN = '''
import json
import jax
import jax.numpy as jnp
import numpy as np
from flax import nn
import model

x = jnp.cos(jnp.arange(8.0)).reshape((2, 4))
out = {}
for kind in ('plain', 'nobias'):
  y, params = model.Net.partial(kind=kind).init(jax.random.PRNGKey(0), x)
  out[kind] = np.asarray(y).tolist()
print(json.dumps(out))
'''

FACTORY_UPGRADED_RUN = '''
import json
import jax
import jax.numpy as jnp
import numpy as np
import model

x = jnp.cos(jnp.arange(8.0)).reshape((2, 4))
out = {}
for kind in ('plain', 'nobias'):
  y, _ = model.Net().init_with_output(jax.random.PRNGKey(0), x, kind=kind)
  out[kind] = np.asarray(y).tolist()
print(json.dumps(out))
'''


def test_function_making_partials_is_not_a_layer_function(tmp_path):
  src, out, report = upgrade_run.upgrade_dir(
      tmp_path, {'model.py': PARTIAL_FACTORY})
  code = (out / 'model.py').read_text()
  assert 'layer.partial(' not in code, code
  entries = [e for f in report['files'].values() for e in f['rewritten']]
  assert not any(e['rule'] == 'layer_function' for e in entries), entries
  if TODO in code:  # left with a TODO: never a silent .partial
    return
  legacy = upgrade_run.run_json(src, FACTORY_RUN, off=False)
  upgraded = upgrade_run.run_json(out, FACTORY_UPGRADED_RUN, off=True)
  for kind in ('plain', 'nobias'):
    np.testing.assert_allclose(upgraded[kind], legacy[kind], rtol=1e-6)


def test_named_user_module_called_in_a_function_is_built_where_it_runs(
    tmp_path):
  # a plain function the layer-function rule does not take (handed to
  # another function: called from anywhere) calling a legacy module class
  # of the codebase by name: built where it runs (_legacy_module_call,
  # docs/decisions.md), the running body's child, as legacy bound it; it
  # kept a TODO before ("a legacy module called outside a module body")
  files = dict(FILES)
  files['model.py'] = MODEL + """

def blocks_twice(x):
  return Block(Block(x, name='b0'), name='b1')


def run(fn, x):
  return fn(x)


class Twice(nn.Module):

  def apply(self, x):
    return run(blocks_twice, x)
"""
  src, out, report = upgrade_run.upgrade_dir(tmp_path, files)
  text = (out / 'model.py').read_text()
  assert ("return _legacy_module_call(Block, _legacy_module_call(Block, x, "
          "name='b0'), name='b1')") in text, text
  assert not any('outside a module body' in e['why']
                 for e in report['files']['model.py']['left'])
  run = RUN.replace("[('enc', model.Encoder, (x,)),\n"
                    "                          ('dual', model.DualEncoder, "
                    "(x, x[:, ::-1]))]", "[('twice', model.Twice, (x,))]")
  assert 'model.Twice' in run
  up_run = UPGRADED_RUN.replace(
      "[('enc', model.Encoder, (x,)),\n                          ('dual', "
      "model.DualEncoder, (x, x[:, ::-1]))]",
      "[('twice', model.Twice, (x,))]")
  legacy = upgrade_run.run_json(src, run, off=False)
  upgraded = upgrade_run.run_json(out, up_run, off=True, legacy_stream=True)
  assert upgraded['twice']['paths'] == legacy['twice']['paths']
  assert any("['b1']['block']" in p or "['b1']" in p
             for p in legacy['twice']['paths']), legacy
  np.testing.assert_allclose(upgraded['twice']['y'], legacy['twice']['y'],
                             rtol=1e-6, atol=1e-6)


