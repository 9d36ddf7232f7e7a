"""flaxlegacy upgrade: a function handed to a function of the codebase that
only calls it (a callback) is called where the value facts see every call.

Research trainers share a model dispatcher (``get_model(kind,
create_model_fn, kwargs, *args)`` calling ``create_model_fn(Encoder,
kwargs, *args)``) and pass it their own ``create_model``; the module class
reaches ``create_model`` through the callback's calls.  Until then any
function used as a value was taken to be called from anywhere, so its
parameters were unknown and ``flax_module.partial(**kw).init_by_shape``
stayed legacy with a TODO.  The upgraded program runs with the layer off
and gives the legacy program's numbers.
"""

import numpy as np

from flaxlegacy.upgrade import api
from tests import upgrade_run

TODO = '# TODO(flaxlegacy upgrade)'

MODELS = '''
import jax.numpy as jnp
from flax import nn


def waves(key, shape, dtype=jnp.float32):
  # deterministic: legacy and linen derive submodule keys apart
  del key
  n = 1
  for d in shape:
    n *= d
  return jnp.cos(jnp.arange(n, dtype=dtype)).reshape(shape)


class Small(nn.Module):

  def apply(self, x, features=3, train=True):
    x = nn.Dense(x, features, kernel_init=waves, name='proj')
    return nn.dropout(x, rate=0.5, deterministic=not train)


class Deep(nn.Module):

  def apply(self, x, hidden=5, features=3, train=True):
    x = nn.relu(nn.Dense(x, hidden, kernel_init=waves, name='hidden'))
    return nn.Dense(x, features, kernel_init=waves, name='out')
'''

UTILS = '''
import models


def get_model(kind, create_model_fn, model_kwargs, *create_model_args):
  if kind == 'small':
    return create_model_fn(models.Small, model_kwargs, *create_model_args)
  elif kind == 'deep':
    return create_model_fn(models.Deep, model_kwargs, *create_model_args)
  raise ValueError(kind)
'''

TRAIN = '''
import jax
import jax.numpy as jnp
from flax import nn
import utils


def create_model(flax_module, model_kwargs, key, input_shape):
  module = flax_module.partial(**model_kwargs)
  with nn.stochastic(key):
    _, initial_params = module.init_by_shape(key, [(input_shape, jnp.float32)])
    model = nn.Model(module, initial_params)
  return model


def run(kind, kwargs):
  x = jnp.arange(8.0).reshape((2, 4)) / 8
  model = utils.get_model(kind, create_model, kwargs, jax.random.PRNGKey(0),
                          x.shape)
  with nn.stochastic(jax.random.PRNGKey(1)):
    y = model(x, train=False)
  return y
'''

RUN = '''
import json
import train
out = {k: train.run(k, {'features': 2}).tolist() for k in ('small', 'deep')}
print(json.dumps(out))
'''


def _files(utils=UTILS):
  return {'models.py': MODELS, 'utils.py': utils, 'train.py': TRAIN}


def test_callback_parameters_take_the_values_of_its_calls(tmp_path):
  src, out, _ = upgrade_run.upgrade_dir(tmp_path, _files())
  train = (out / 'train.py').read_text()
  assert TODO not in train, train
  assert 'init_by_shape(key' not in train  # rewritten, not kept legacy
  legacy = upgrade_run.run_json(src, RUN, off=False)
  upgraded = upgrade_run.run_json(out, RUN, off=True, legacy_stream=True)
  for k in ('small', 'deep'):
    np.testing.assert_allclose(upgraded[k], legacy[k], rtol=1e-6, atol=1e-7)
    assert np.shape(upgraded[k]) == (2, 2)


def test_callback_whose_parameter_escapes_stays_unknown(tmp_path):
  # the dispatcher also hands the callback on to code the facts cannot see
  utils = UTILS.replace(
      "  raise ValueError(kind)",
      "  REGISTRY.append(create_model_fn)\n  raise ValueError(kind)"
  ).replace('import models', 'import models\nREGISTRY = []')
  src = upgrade_run.write_tree(tmp_path / 'src', _files(utils))
  status, _ = api.upgrade_paths([str(src)], out=str(tmp_path / 'out'))
  assert status == 0
  train = (tmp_path / 'out' / 'train.py').read_text()
  assert TODO in train and "'flax_module'" in train, train


def test_callback_passed_to_an_unknown_function_stays_unknown(tmp_path):
  run_elsewhere = TRAIN + '''

def run_elsewhere(runner):
  return runner(create_model)
'''
  files = _files()
  files['train.py'] = run_elsewhere
  src = upgrade_run.write_tree(tmp_path / 'src', files)
  status, _ = api.upgrade_paths([str(src)], out=str(tmp_path / 'out'))
  assert status == 0
  train = (tmp_path / 'out' / 'train.py').read_text()
  assert TODO in train and "'flax_module'" in train, train


TRAIN_STATEFUL = '''
import jax
import jax.numpy as jnp
from flax import nn
import utils


def create_model(flax_module, model_kwargs, key, input_shape):
  module = flax_module.partial(**model_kwargs)
  with nn.stateful() as init_state:
    with nn.stochastic(key):
      _, initial_params = module.init_by_shape(key,
                                               [(input_shape, jnp.float32)])
      model = nn.Model(module, initial_params)
  return model, init_state


def run(kind, kwargs):
  x = jnp.arange(8.0).reshape((2, 4)) / 8
  model, state = utils.get_model(kind, create_model, kwargs,
                                 jax.random.PRNGKey(0), x.shape)
  with nn.stateful(state, mutable=False):
    return model(x, train=False)
'''


def test_dispatcher_result_follows_the_callback_of_each_call(tmp_path):
  # a second trainer hands the same dispatcher a create_model returning
  # (model, state): each call of the dispatcher returns what its own
  # callback returns, so neither trainer's model is "a model or a tuple"
  files = _files()
  files['train_stateful.py'] = TRAIN_STATEFUL
  src, out, _ = upgrade_run.upgrade_dir(tmp_path, files)
  train = (out / 'train.py').read_text()
  assert TODO not in train, train
  stateful = (out / 'train_stateful.py').read_text()
  assert TODO not in stateful, stateful
  run = RUN + '''
import train_stateful
out = {k: train_stateful.run(k, {'features': 2}).tolist()
       for k in ('small', 'deep')}
print(json.dumps(out))
'''
  for module in ('train', 'train_stateful'):
    code = run if module == 'train_stateful' else RUN
    legacy = upgrade_run.run_json(src, code, off=False)
    upgraded = upgrade_run.run_json(out, code, off=True, legacy_stream=True)
    for k in ('small', 'deep'):
      np.testing.assert_allclose(upgraded[k], legacy[k], rtol=1e-6,
                                 atol=1e-7)
