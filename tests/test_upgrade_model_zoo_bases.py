"""flaxlegacy upgrade: a model zoo of legacy modules over an abstract base.

The shape of google-research's gift (2021): ``class BaseModel(nn.Module)``
with no ``apply``, only classmethods (``build_flax_module(cls, hparams)``
returning the hyper-parameters); model classes in other files
(``class ResNet(base_model.BaseModel)``) with their own ``apply`` and a
``build_flax_module`` classmethod that calls ``super(ResNet, cls)...`` and
returns ``cls.partial(**hparams)``; a registry picks the class; a pipeline
function ``init_by_shape``s whatever definition it is given inside
``nn.stateful()`` and makes ``nn.Model``; a forward helper unpacks several
outputs of a model call in an ``nn.stateful`` block; a head bias
initializer is ``functools.partial(constant_initializer, fill_value=v)``
of a ``(key, shape, fill_value)`` function; a ``TrainState`` struct is held
in a variable named ``train_state``.

Before: the model classes were not legacy modules at all (their base was
in another file): their bodies stayed legacy with TODOs, and
``cls.partial`` had a TODO (a crash at a TODO); with those fixed, four
crashes with no TODO were behind them: ``constant_initializer`` got
linen's dtype on ``fill_value`` (TypeError), ``a, b, s = apply(...,
mutable=...)`` unpacked ``(outputs, state)`` into three names
(ValueError), and ``train_state.TrainState.create`` read the module name
``train_state`` where a local of that name shadowed it
(UnboundLocalError), and ``model.module.__name__`` (logging code) of a
carried model whose module is a ``functools.partial`` (AttributeError).
Now every step runs with the layer off and gives the
legacy numbers.
"""

import numpy as np

from tests import upgrade_run

TODO = '# TODO(flaxlegacy upgrade)'

BASE = '''
from flax import nn


class BaseModel(nn.Module):
  """Factories only."""

  @classmethod
  def build(cls, hparams=None):
    if hparams is None:
      hparams = cls.default_hparams()
    return hparams

  @classmethod
  def default_hparams(cls):
    raise NotImplementedError()
'''

INITS = '''
import jax.numpy as jnp


def waves(key, shape, dtype=jnp.float32):
  del key
  n = 1
  for d in shape:
    n *= d
  return jnp.sin(jnp.arange(n, dtype=dtype) * 0.7).reshape(shape)


def constant_initializer(unused_key, shape, fill_value):
  return jnp.full(shape, fill_value)
'''

WIDE = '''
import functools
from flax import nn
import jax.numpy as jnp
from zoo import base_model
from zoo import inits


class Wide(base_model.BaseModel):

  def apply(self, x, features, head_bias_init=jnp.zeros, train=True,
            return_reps=False):
    h = nn.Dense(x, features, kernel_init=inits.waves, name='hidden')
    h = nn.BatchNorm(h, use_running_average=not train, name='bn')
    y = nn.Dense(nn.relu(h), 2, kernel_init=inits.waves,
                 bias_init=head_bias_init, name='head')
    if return_reps:
      return y, h
    return y

  @classmethod
  def build(cls, hparams=None):
    hparams = super(Wide, cls).build(hparams)
    return cls.partial(
        features=hparams['features'],
        head_bias_init=functools.partial(inits.constant_initializer,
                                         fill_value=hparams['bias'])), hparams

  @classmethod
  def default_hparams(cls):
    return {'features': 5, 'bias': 0.25}
'''

DEEP = '''
from flax import nn
from zoo import base_model
from zoo import inits


class Deep(base_model.BaseModel):

  def apply(self, x, width, depth=2, train=True, return_reps=False):
    for i in range(depth):
      x = nn.relu(nn.Dense(x, width, kernel_init=inits.waves,
                           name=f'layer{i}'))
    h = nn.BatchNorm(x, use_running_average=not train, name='bn')
    y = nn.Dense(h, 2, kernel_init=inits.waves, name='head')
    if return_reps:
      return y, h
    return y

  @classmethod
  def build(cls, hparams=None):
    hparams = super(Deep, cls).build(hparams)
    return cls.partial(width=hparams['width'], depth=hparams['depth']), hparams

  @classmethod
  def default_hparams(cls):
    return {'width': 3, 'depth': 2}
'''

REGISTRY = '''
from zoo import deep
from zoo import wide

ALL_MODELS = {}
ALL_MODELS.update({'wide': wide.Wide, 'deep': deep.Deep})


def get_model_class(name):
  return ALL_MODELS[name]
'''

PIPELINE = '''
import flax
from flax import nn
from flax import optim
import jax
import jax.numpy as jnp


@flax.struct.dataclass
class TrainState:
  optimizer: optim.Optimizer
  model_state: nn.Collection


def create_model(module_def, shape, rng):
  with nn.stateful() as init_state:
    _, params = module_def.init_by_shape(rng, [(shape, jnp.float32)])
  return nn.Model(module_def, params), init_state


def forward(batch, model, model_state):
  with nn.stateful(model_state) as new_state:
    logits, reps = model(batch, train=True, return_reps=True)
  return logits, reps, new_state


def make_train_state(model, model_state):
  train_state = TrainState(
      optimizer=optim.GradientDescent(0.1).create(model),
      model_state=model_state)
  return train_state
'''

RUN = '''
import json
import jax
import jax.numpy as jnp
import numpy as np
from zoo import pipeline
from zoo import registry

out = {}
x = jnp.asarray(np.linspace(-1., 1., 8, dtype=np.float32).reshape(2, 4))
for name in ('wide', 'deep'):
  model_cls = registry.get_model_class(name)
  module_def, hparams = model_cls.build()
  model, state = pipeline.create_model(module_def, (2, 4), jax.random.PRNGKey(0))
  logits, reps, new_state = pipeline.forward(x, model, state)
  out[name + '_logits'] = np.asarray(logits).tolist()
  out[name + '_reps'] = np.asarray(reps).tolist()
  means = [np.asarray(v).tolist() for v in jax.tree_util.tree_leaves(
      new_state.as_dict() if hasattr(new_state, 'as_dict') else new_state)]
  out[name + '_state'] = means
  ts = pipeline.make_train_state(model, new_state)
  out[name + '_ts'] = type(ts).__name__
  out[name + '_module'] = model.module.__name__
import sys
out['flaxlegacy'] = 'flaxlegacy' in sys.modules
print(json.dumps(out))
'''

FILES = {'zoo/__init__.py': '', 'zoo/base_model.py': BASE,
         'zoo/inits.py': INITS, 'zoo/wide.py': WIDE, 'zoo/deep.py': DEEP,
         'zoo/registry.py': REGISTRY, 'zoo/pipeline.py': PIPELINE,
         'run.py': RUN}


def test_model_zoo_over_an_abstract_base(tmp_path):
  src, out, _ = upgrade_run.upgrade_dir(tmp_path, FILES)
  zoo = {n: (out / 'zoo' / f'{n}.py').read_text()
         for n in ('base_model', 'wide', 'deep', 'pipeline')}
  for name, code in zoo.items():
    assert TODO not in code, (name, code)
  # the model classes keep their abstract base; the base its factories
  assert 'class Wide(base_model.BaseModel):' in zoo['wide']
  assert '@nn.compact' in zoo['wide'] and '@nn.compact' in zoo['deep']
  assert 'def build(cls, hparams=None):' in zoo['base_model']
  assert '.partial(' not in zoo['wide'].replace('functools.partial(', '')
  assert 'legacy_initializer(functools.partial(' in zoo['wide']
  assert 'init_module_by_shape' in zoo['pipeline']
  assert '(logits, reps), new_state = ' in zoo['pipeline']
  assert 'FlaxTrainState.create(' in zoo['pipeline']
  legacy = upgrade_run.run_json(src, RUN, off=False)
  upgraded = upgrade_run.run_json(out, (out / 'run.py').read_text(),
                                  off=True)
  assert upgraded['flaxlegacy'] is False
  for name in ('wide', 'deep'):
    for k in ('logits', 'reps'):
      np.testing.assert_allclose(upgraded[f'{name}_{k}'],
                                 legacy[f'{name}_{k}'], rtol=1e-5,
                                 atol=1e-6)
    # batch statistics (mean, var), the same leaves in the same order
    assert len(upgraded[f'{name}_state']) == len(legacy[f'{name}_state'])
    for a, b in zip(upgraded[f'{name}_state'], legacy[f'{name}_state']):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  assert upgraded['wide_ts'] == legacy['wide_ts'] == 'TrainState'
  # legacy's Wide.partial(...) was a class named Wide (logging code reads
  # model.module.__name__: AttributeError on a functools.partial before)
  assert upgraded['wide_module'] == legacy['wide_module'] == 'Wide'
  assert upgraded['deep_module'] == legacy['deep_module'] == 'Deep'


INIT_PARTIAL = '''
import functools
import json
import jax
import jax.numpy as jnp
import numpy as np
from flax import nn


def constant_initializer(unused_key, shape, fill_value):
  return jnp.full(shape, fill_value)


class Head(nn.Module):

  def apply(self, x):
    return nn.Dense(x, 3, bias_init=functools.partial(
        constant_initializer, fill_value=0.5), name='head')


_, params = Head.init(jax.random.PRNGKey(0), jnp.ones((1, 2)))
print(json.dumps({'bias': np.asarray(params['head']['bias']).tolist()}))
'''


def test_partial_of_an_initializer_with_more_parameters(tmp_path):
  """Legacy layers called ``init(key, shape)``; linen passes a dtype third,
  onto ``fill_value`` (TypeError: multiple values, no TODO before)."""
  src, out, _ = upgrade_run.upgrade_dir(tmp_path, {'m.py': INIT_PARTIAL})
  code = (out / 'm.py').read_text()
  assert 'upgraded_layers.legacy_initializer(functools.partial(' in code, code
  assert TODO not in code, code
  legacy = upgrade_run.run_json(src, INIT_PARTIAL, off=False)
  upgraded = upgrade_run.run_json(out, code, off=True)
  assert upgraded == legacy == {'bias': [0.5, 0.5, 0.5]}


STATEFUL_TUPLE = '''
import json
import jax
import jax.numpy as jnp
import numpy as np
from flax import nn
from flax import optim


def waves(key, shape, dtype=jnp.float32):
  del key
  n = 1
  for d in shape:
    n *= d
  return jnp.sin(jnp.arange(n, dtype=dtype) * 0.7).reshape(shape)


class Net(nn.Module):

  def apply(self, x, train=True):
    h = nn.Dense(x, 3, kernel_init=waves, name='dense')
    h = nn.BatchNorm(h, use_running_average=not train, name='bn')
    return h, 2. * h


def make_optimizer(model):
  train_state = optim.GradientDescent(0.1).create(model)
  return train_state


x = jnp.asarray(np.linspace(-1., 1., 8, dtype=np.float32).reshape(2, 4))
with nn.stateful() as state:
  _, params = Net.init(jax.random.PRNGKey(0), x)
model = nn.Model(Net, params)
with nn.stateful(state) as new_state:
  a, b = model(x)
opt = make_optimizer(model)
leaves = jax.tree_util.tree_leaves(
    new_state.as_dict() if hasattr(new_state, 'as_dict') else new_state)
print(json.dumps({'a': np.asarray(a).tolist(), 'b': np.asarray(b).tolist(),
                  'state': [np.asarray(v).tolist() for v in leaves],
                  'opt': type(opt).__name__}))
'''


def test_outputs_unpacked_in_a_stateful_block_and_a_train_state_local(
    tmp_path):
  """``a, b = model(x)`` in ``nn.stateful``: apply returns (outputs,
  state), written ``(a, b), new_state = ...`` (was ``a, b, new_state``:
  ValueError, no TODO); ``train_state = opt_def.create(model)`` in a
  function: the TrainState class is not read through a module named
  ``train_state`` the local shadows (was UnboundLocalError, no TODO)."""
  src, out, _ = upgrade_run.upgrade_dir(tmp_path, {'m.py': STATEFUL_TUPLE})
  code = (out / 'm.py').read_text()
  assert '(a, b), new_state = ' in code, code
  assert 'train_state = FlaxTrainState.create(' in code, code
  assert TODO not in code, code
  legacy = upgrade_run.run_json(src, STATEFUL_TUPLE, off=False)
  upgraded = upgrade_run.run_json(out, code, off=True)
  for k in ('a', 'b'):
    np.testing.assert_allclose(upgraded[k], legacy[k], rtol=1e-5, atol=1e-6)
  assert len(upgraded['state']) == len(legacy['state']) == 2
  for u, l in zip(upgraded['state'], legacy['state']):
    np.testing.assert_allclose(u, l, rtol=1e-5, atol=1e-6)
  assert upgraded['opt'] == 'TrainState'
