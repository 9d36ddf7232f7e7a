"""flaxlegacy upgrade: legacy auto-names of submodules built in plain
functions and lambdas run from module bodies (rules/autoname_stack.py).

Legacy Flax numbered an unnamed submodule on the counter of the module
whose ``apply`` ran when it was built.  Two shapes of 2020-2021 research
code rely on it: init2winit's VGG, whose ``features()`` calls a local
``nn.Conv.partial(...)`` in a loop (and a normalizer that is a layer or a
lambda) and whose ``classifier()`` calls ``nn.Dense`` unnamed, and
cold_posterior's WideResNet, whose ``get_activation_f`` returns a lambda
building a legacy module, made in the network and called inside its
blocks (on the block's counter).  Upgraded, the bodies that can reach such
code run in a counter frame of their own (``@legacy_names.autoname_frame``)
and the functions and lambdas draw from the running one: the legacy
parameter tree and numbers, under init, apply and ``jax.jit`` of apply.
"""

import importlib.util
import shutil

import numpy as np
import pytest

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
  return jnp.sin(jnp.arange(n, dtype=dtype) * 0.7).reshape(shape) * 0.3


def get_normalizer(kind, train):
  if kind == 'batch_norm':
    return nn.BatchNorm.partial(use_running_average=not train, momentum=0.9)
  return lambda x: x
'''

VGG = '''
import jax.numpy as jnp
from flax import nn

import common
from common import waves


def classifier(x, num_outputs):
  x = nn.Dense(x, 5, kernel_init=waves)
  x = nn.relu(x)
  return nn.Dense(x, num_outputs, kernel_init=waves)


def features(x, sizes, normalizer, train):
  conv = nn.Conv.partial(bias=False, kernel_init=waves)
  maybe_normalize = common.get_normalizer(normalizer, train)
  for l in sizes:
    if l == 'M':
      x = nn.max_pool(x, window_shape=(2, 2), strides=(2, 2))
    else:
      x = conv(x, features=l, kernel_size=(3, 3), padding=((1, 1), (1, 1)))
      x = maybe_normalize(x)
      x = nn.relu(x)
  return x


class VGG(nn.Module):

  def apply(self, x, sizes=(4, 'M', 3, 3), num_outputs=2,
            normalizer='none', train=True):
    x = nn.Conv(x, 3, (1, 1), kernel_init=waves)
    x = features(x, sizes, normalizer, train)
    x = jnp.reshape(x, (x.shape[0], -1))
    x = classifier(x, num_outputs)
    return nn.Dense(x, 2, kernel_init=waves)
'''

WRN = '''
import jax.numpy as jnp
from flax import nn

from common import waves


class BiasScale(nn.Module):

  def apply(self, x, features=None, scale=1.0):
    del features
    b = self.param('bias', (x.shape[-1],),
                   lambda k, s: jnp.linspace(-0.2, 0.3, s[0]))
    return scale * nn.relu(x + b)


def get_activation_f(kind):
  if kind == 'relu':
    return lambda x, **kwargs: nn.relu(x)
  if kind == 'bias_scale':
    return lambda x, **kwargs: BiasScale(x, scale=2.0)
  raise ValueError(kind)


class Block(nn.Module):

  def apply(self, x, features, activation_f=None):
    y = nn.Dense(x, features, kernel_init=waves)
    y = activation_f(y, features=features)
    y = nn.Dense(y, features, kernel_init=waves)
    return activation_f(y) + x


class Group(nn.Module):

  def apply(self, x, blocks, activation_f=None):
    for _ in range(blocks):
      x = Block(x, x.shape[-1], activation_f=activation_f)
    return activation_f(x)


class Net(nn.Module):

  def apply(self, x, activation='bias_scale'):
    activation_f = get_activation_f(activation)
    x = nn.Dense(x, 3, kernel_init=waves)
    x = activation_f(x)
    x = Block(x, 3, activation_f=activation_f)
    x = Group(x, 2, activation_f=activation_f)
    return nn.Dense(x, 2, kernel_init=waves)
'''

# cold_posterior's spelling: the lambdas take ``**kwargs`` (the blocks pass
# ``features=``) and splat them into the legacy module; a lambda made in a
# body (``act2``) and handed to a block draws from the block's counter too
ACT = '''
import jax.numpy as jnp
from flax import nn

from common import waves


class BiasNorm(nn.Module):

  def apply(self, x, features=None, scale=False, bias_init=None):
    b = self.param('bias', (features or x.shape[-1],), bias_init)
    y = nn.relu(x + b)
    if scale:
      y = y * self.param('scale', (x.shape[-1],),
                         lambda k, s: jnp.linspace(0.5, 1.5, s[0]))
    return y


def get_activation_f(kind, bias_scale):
  if kind == 'relu':
    activation_f = lambda x, **kwargs: nn.activation.relu(x)
  elif kind == 'bias_norm':
    activation_f = lambda x, **kwargs: BiasNorm(
        x, bias_init=lambda k, s: jnp.full(s, bias_scale), scale=True,
        **kwargs)
  else:
    raise ValueError('activation_f')
  activation_f.__name__ = kind
  return activation_f


class Block(nn.Module):

  def apply(self, x, channels, activation_f=None):
    y = nn.Dense(x, channels, kernel_init=waves)
    y = activation_f(y, features=y.shape[-1])
    return nn.Dense(y, channels, kernel_init=waves, name='out') + x


class Net(nn.Module):

  def apply(self, x, activation_f='bias_norm'):
    activation_f = get_activation_f(activation_f, 0.1)
    act2 = lambda y, **kw: BiasNorm(y, bias_init=lambda k, s: jnp.full(s, -0.1))
    x = nn.Dense(x, 3, kernel_init=waves)
    x = Block(x, 3, activation_f=activation_f)
    x = Block(x, 3, activation_f=act2)
    return activation_f(x)
'''

FILES = {'common.py': COMMON, 'vgg.py': VGG, 'wrn.py': WRN, 'act.py': ACT}

CASES = [
    ('vgg', 'vgg.VGG', {}, (2, 6, 6, 3)),
    ('vgg_bn', 'vgg.VGG', {'normalizer': 'batch_norm', 'train': False},
     (2, 6, 6, 3)),
    ('wrn', 'wrn.Net', {}, (2, 4)),
    ('wrn_relu', 'wrn.Net', {'activation': 'relu'}, (2, 4)),
    ('act', 'act.Net', {}, (2, 4)),
    ('act_relu', 'act.Net', {'activation_f': 'relu'}, (2, 4)),
]

RUN = '''
import json
import jax
import jax.numpy as jnp
import numpy as np
from flax import nn
import act, vgg, wrn

CASES = %r
out = {}
for name, cls, kw, shape in CASES:
  x = jnp.cos(jnp.arange(np.prod(shape), dtype=jnp.float32)).reshape(shape)
  module = eval(cls).partial(**kw)
  with nn.stateful() as state:
    y, params = module.init(jax.random.PRNGKey(0), x)
  flat = jax.tree_util.tree_flatten_with_path(params)[0]
  out[name] = {'y': np.asarray(y).tolist(), 'y2': np.asarray(y).tolist(),
               'paths': sorted(jax.tree_util.keystr(p) for p, _ in flat)}
print(json.dumps(out))
''' % (CASES,)

UPGRADED_RUN = '''
import dataclasses
import functools
import json
import jax
import jax.numpy as jnp
import numpy as np
import act, vgg, wrn

CASES = %r
out = {}
for name, cls, kw, shape in CASES:
  x = jnp.cos(jnp.arange(np.prod(shape), dtype=jnp.float32)).reshape(shape)
  fields = {f.name for f in dataclasses.fields(eval(cls))}
  module = eval(cls)(**{k: v for k, v in kw.items() if k in fields})
  call = {k: v for k, v in kw.items() if k not in fields}
  y, v = module.init_with_output(jax.random.PRNGKey(0), x, **call)
  # apply under jax.jit: traced again, the same names must come back
  y2 = jax.jit(functools.partial(module.apply, **call))(v, x)
  flat = jax.tree_util.tree_flatten_with_path(v['params'])[0]
  out[name] = {'y': np.asarray(y).tolist(), 'y2': np.asarray(y2).tolist(),
               'paths': sorted(jax.tree_util.keystr(p) for p, _ in flat)}
print(json.dumps(out))
''' % (CASES,)


@pytest.fixture(scope='module')
def upgraded(tmp_path_factory):
  tmp = tmp_path_factory.mktemp('stack')
  src, out, report = upgrade_run.upgrade_dir(tmp, FILES)
  legacy = upgrade_run.run_json(src, RUN, off=False)
  got = upgrade_run.run_json(out, UPGRADED_RUN, off=True)
  return out, report, legacy, got


def test_functions_and_lambdas_draw_from_the_running_body(upgraded):
  out = upgraded[0]
  vgg = (out / 'vgg.py').read_text()
  wrn = (out / 'wrn.py').read_text()
  common = (out / 'common.py').read_text()
  for code in (vgg, wrn, common):
    assert TODO not in code, code
  assert '@legacy_names.autoname_frame' in vgg, vgg
  assert ("name=f'Conv_{next(legacy_names.autoname_counter())}'" in vgg), vgg
  assert ("BiasScale(scale=2.0, name=f'BiasScale_{next(legacy_names."
          "autoname_counter())}')(x)") in wrn, wrn
  # a body that reaches such code counts all its auto-names from its frame
  assert ('legacy_autoname = legacy_names.autoname_counter()' in wrn), wrn


@pytest.mark.parametrize('case', [c[0] for c in CASES])
def test_same_parameter_tree_and_numbers_as_legacy(upgraded, case):
  _, _, legacy, got = upgraded
  assert got[case]['paths'] == legacy[case]['paths']
  # the legacy numbering these shapes rely on: one counter per running body
  expect = {'vgg': ["['Conv_1']", "['Dense_4']", "['Dense_5']"],
            'vgg_bn': ["['BatchNorm_2']", "['BatchNorm_6']", "['Dense_9']"],
            'wrn': ["['BiasScale_1']", "['Block_2']['BiasScale_3']",
                    "['Group_3']['Block_1']['BiasScale_3']",
                    "['Group_3']['Block_1']['Dense_2']",
                    "['Group_3']['BiasScale_2']", "['Dense_4']"],
            'wrn_relu': ["['Group_2']['Block_1']['Dense_1']",
                         "['Dense_3']"],
            'act': ["['Block_1']['BiasNorm_1']", "['Block_2']['BiasNorm_1']",
                    "['BiasNorm_3']"],
            'act_relu': ["['Block_2']['BiasNorm_1']"]}[case]
  for e in expect:
    assert any(p.startswith(e) for p in legacy[case]['paths']), (
        e, legacy[case]['paths'])
  np.testing.assert_allclose(got[case]['y'], legacy[case]['y'], rtol=1e-5,
                             atol=1e-6)
  np.testing.assert_allclose(got[case]['y2'], legacy[case]['y'], rtol=1e-5,
                             atol=1e-6)


def test_function_reached_from_outside_module_bodies_keeps_todo(tmp_path):
  # a call from code that is no module body: which counter legacy drew
  # from is not the upgrade's to know there; the TODOs stay
  files = dict(FILES)
  files['program.py'] = '''
import vgg

def head_outside(x):
  return vgg.classifier(x, 3)
'''
  _, out, _ = upgrade_run.upgrade_dir(tmp_path, files)
  code = (out / 'vgg.py').read_text()
  head = code[code.index('def classifier'):code.index('def features')]
  assert TODO in head and 'nn.Dense(x, 5' in head, head
  assert 'autoname_counter' not in head, head
  # features() is still called from module bodies alone: rewritten
  feats = code[code.index('def features'):code.index('class VGG')]
  assert TODO not in feats and 'autoname_counter()' in feats, feats


HELPER_RUN = '''
import json
import jax
import jax.numpy as jnp
from flax import linen as nn
import legacy_names  # flaxlegacy/migrate/upgraded.py, as shipped


def build(x):
  return nn.Dense(2, name=f'Dense_{next(legacy_names.autoname_counter())}')(x)


class Marked(nn.Module):

  @nn.compact
  @legacy_names.autoname_frame
  def __call__(self, x):
    legacy_autoname = legacy_names.autoname_counter()
    x = nn.Dense(3, name=f'Dense_{next(legacy_autoname)}')(x)
    return build(build(x))


class Unmarked(nn.Module):

  @nn.compact
  def __call__(self, x):
    return build(x)


class Parent(nn.Module):

  @nn.compact
  @legacy_names.autoname_frame
  def __call__(self, x):
    inner = Unmarked(name='inner')
    return inner(nn.Dense(2, name='d')(x))


x = jnp.ones((1, 2))
out = {}
v = Marked().init(jax.random.PRNGKey(0), x)
out['paths'] = sorted(v['params'])
out['same'] = bool(jnp.allclose(Marked().apply(v, x),
                                jax.jit(Marked().apply)(v, x)))
for name, module in (('unmarked', Unmarked()), ('nested', Parent())):
  try:
    module.init(jax.random.PRNGKey(0), x)
    out[name] = None
  except ValueError as e:
    out[name] = str(e)
try:
  build(x)
  out['outside'] = None
except ValueError as e:
  out['outside'] = str(e)
print(json.dumps(out))
'''


def test_shipped_counter_frames(tmp_path):
  shutil.copy(importlib.util.find_spec('flaxlegacy.migrate.upgraded').origin,
              tmp_path / 'legacy_names.py')
  got = upgrade_run.run_json(tmp_path, HELPER_RUN, off=True)
  # one counter per call of the marked method, across its functions
  assert got['paths'] == ['Dense_0', 'Dense_1', 'Dense_2'], got
  assert got['same'], got
  # a method not marked, or no module at all: no name is guessed (the
  # parent's frame is not the running module's)
  assert 'built in Unmarked' in got['unmarked'], got
  assert 'built in Unmarked' in got['nested'], got
  assert 'built outside any module' in got['outside'], got
