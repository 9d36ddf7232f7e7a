"""flaxlegacy upgrade: legacy layers handed to modules and called
legacy-style (rules/called_layers.py).

Research code chooses a layer by a setting (``nn.BatchNorm.partial(...)``,
``nn.LayerNorm`` or an identity function), passes ``nn.Conv.partial(...)``
or a ``.partial`` of its own module class to a block as a hyper-parameter,
gives a hyper-parameter a layer as default, and calls the value as legacy
did: ``conv(x, features, (3, 3), strides, name='conv1')``.  Where the
values are known but split differently (a function among them, classes of
different fields), the call is split at run time by the class the value
holds; the upgraded program (FLAXLEGACY=off) gives the legacy numbers and
parameter names for every choice.  What cannot be split with certainty
keeps a TODO.
"""

import textwrap

import numpy as np
import pytest

from flaxlegacy.upgrade import upgrade_source
from tests import upgrade_run

TODO = '# TODO(flaxlegacy upgrade)'

LAYERS = '''
import jax.numpy as jnp
from flax import nn


def waves(key, shape, dtype=jnp.float32):
  del key
  n = 1
  for d in shape:
    n *= d
  return jnp.sin(jnp.arange(n, dtype=dtype) * 0.7).reshape(shape) * 0.3


def get_normalizer(kind, train):
  if kind == 'batch_norm':
    return nn.BatchNorm.partial(use_running_average=not train, momentum=0.9)
  elif kind == 'layer_norm':
    return nn.LayerNorm
  elif kind == 'group_norm':
    return nn.GroupNorm.partial(num_groups=2, scale=False)
  def identity(x, name=None):
    del name
    return x
  return identity


class ScaledConv(nn.Module):

  def apply(self, inputs, features, kernel_size, strides=None, gain=2.0,
            kernel_init=None):
    y = nn.Conv(inputs, features, kernel_size, strides, bias=False,
                kernel_init=kernel_init)
    return gain * y


class ShiftedConv(nn.Module):

  def apply(self, inputs, features, kernel_size, strides=None,
            kernel_init=None, shift=0.1):
    return nn.Conv(inputs, features, kernel_size, strides,
                   kernel_init=kernel_init) + shift


def get_conv(kind):
  if kind == 'plain':
    return nn.Conv.partial(bias=False, kernel_init=waves)
  if kind == 'scaled':
    conv = ScaledConv.partial(gain=0.5)
  else:
    conv = ShiftedConv
  return conv.partial(kernel_init=waves)


class Head(nn.Module):

  def apply(self, x, features, norm=nn.LayerNorm):
    y = nn.Dense(x, features, kernel_init=waves)
    return norm(y)


class Block(nn.Module):

  def apply(self, x, features, *, conv, norm_kind='batch_norm',
            strides=(1, 1), train=True):
    norm = get_normalizer(norm_kind, train)
    y = conv(x, features, (3, 3), strides, name='conv1')
    y = norm(y)
    y = conv(y, features, (3, 3))
    y = norm(y, name='norm2')
    return nn.relu(y)


class Net(nn.Module):

  def apply(self, x, conv_kind='plain', norm_kind='batch_norm', train=True):
    conv = get_conv(conv_kind)
    x = conv(x, 4, (3, 3), name='stem')
    for i in range(2):
      x = Block(x, 4, conv=conv, norm_kind=norm_kind,
                strides=(2, 2) if i else (1, 1), train=train)
    x = x.mean(axis=(1, 2))
    if norm_kind == 'none':
      return Head(x, 3)
    return Head(x, 4, norm=get_normalizer(norm_kind, train))
'''

RUN = '''
import json
import jax
import jax.numpy as jnp
import numpy as np
from flax import nn
import layers

x = jnp.cos(jnp.arange(2 * 6 * 6 * 3.0)).reshape((2, 6, 6, 3))
out = {}
for ck, nk in [('plain', 'batch_norm'), ('scaled', 'layer_norm'),
               ('scaled', 'none'), ('plain', 'none'),
               ('shifted', 'group_norm')]:
  with nn.stateful() as state:
    y, params = layers.Net.partial(conv_kind=ck, norm_kind=nk).init(
        jax.random.PRNGKey(0), x)
  flat = jax.tree_util.tree_flatten_with_path(params)[0]
  out[ck + '/' + nk] = {
      'y': np.asarray(y).tolist(),
      'paths': sorted(jax.tree_util.keystr(p) for p, _ in flat)}
print(json.dumps(out))
'''


def test_layers_handed_to_modules_are_called_at_run_time(tmp_path):
  _, out, _ = upgrade_run.upgrade_dir(tmp_path, {'layers.py': LAYERS})
  code = (out / 'layers.py').read_text()
  # the positional hyper-parameters named, the name given or counted
  assert ("y = _legacy_layer_call(self.conv, ('features', 'kernel_size', "
          "'strides'), None, x, self.features, (3, 3), self.strides, "
          "name='conv1')") in code, code
  assert ('y = _legacy_layer_call(norm, (), legacy_autoname, y)') in code
  assert ("y = _legacy_layer_call(self.conv, ('features', 'kernel_size'), "
          'legacy_autoname, y, self.features, (3, 3))') in code, code
  assert "y = _legacy_layer_call(norm, (), None, y, name='norm2')" in code
  assert ("x = _legacy_layer_call(conv, ('features', 'kernel_size'), None, "
          "x, 4, (3, 3), name='stem')") in code, code
  # the default of a hyper-parameter is a layer too
  assert 'return _legacy_layer_call(self.norm, (), legacy_autoname, y)' in (
      code)
  assert code.count('def _legacy_layer_call(') == 1
  # the only TODOs: a bare nn.LayerNorm as a value (the rewrite of the
  # value itself is not certain: the calls above are)
  todos = [l.strip() for l in code.splitlines() if TODO in l]
  assert todos == [TODO + ': nn.LayerNorm: no certain linen rewrite here'
                   ] * 2, todos


@pytest.mark.slow
def test_layers_handed_to_modules_give_the_legacy_numbers(tmp_path):
  """Every choice (a BatchNorm partial, nn.LayerNorm, an identity
  function; nn.Conv's partial, a partial of a codebase class) gives the
  legacy outputs and parameter names (deterministic initializers: linen
  derives parameter keys apart), exactly (measured: identical floats)."""
  src, out, _ = upgrade_run.upgrade_dir(tmp_path, {'layers.py': LAYERS,
                                                   'run.py': RUN})
  run = (out / 'run.py').read_text()
  assert TODO not in run, run
  legacy = upgrade_run.run_json(src, RUN, off=False)
  upgraded = upgrade_run.run_json(out, run, off=True)
  assert set(legacy) == set(upgraded) == {
      'plain/batch_norm', 'scaled/layer_norm', 'scaled/none', 'plain/none',
      'shifted/group_norm'}
  for k, a in legacy.items():
    b = upgraded[k]
    assert b['paths'] == a['paths'], k
    np.testing.assert_allclose(b['y'], a['y'], rtol=1e-6, atol=1e-6,
                               err_msg=k)
  # the choices differ (the comparison is not vacuous), the auto-names too
  assert legacy['plain/batch_norm']['y'] != legacy['scaled/layer_norm']['y']
  assert "['Block_0']['BatchNorm_0']['scale']" in legacy['plain/batch_norm'][
      'paths']
  assert "['Block_0']['ScaledConv_1']['Conv_0']['kernel']" in legacy[
      'scaled/layer_norm']['paths']
  # a function takes no number: the conv after it is the second submodule
  assert "['Block_0']['Conv_0']['kernel']" in legacy['plain/none']['paths']


def test_helper_splits_by_the_class_it_holds():
  """``_legacy_layer_call`` (written into an upgraded file): a partial of a
  linen class is constructed inside the caller with the legacy name or
  auto-name; the keywords a ``partial_module`` keeps for the call reach
  the call; a function is called as written and takes no number."""
  import functools  # pylint: disable=g-import-not-at-top
  import itertools  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from flax import linen  # pylint: disable=g-import-not-at-top
  from flaxlegacy.migrate import upgraded  # pylint: disable=g-import-not-at-top
  from flaxlegacy.upgrade.emit import linen as linen_emit  # pylint: disable=g-import-not-at-top

  scope = {}
  exec(linen_emit.LAYER_CALL_HELPER_SRC, scope)  # pylint: disable=exec-used
  call = scope[linen_emit.LAYER_CALL_HELPER]

  class Shift(linen.Module):
    features: int = 2

    @linen.compact
    def __call__(self, x, shift=0.):
      return linen.Dense(self.features)(x) + shift

  seen = []

  def plain(x, n, name=None):
    seen.append(name)
    return x * n

  class Outer(linen.Module):

    @linen.compact
    def __call__(self, x):
      count = itertools.count()
      y = call(plain, ('n',), count, x, 3.)
      y = call(functools.partial(Shift, features=3), (), count, y)
      y = call(upgraded.partial_module(Shift, shift=1.), ('features',),
               count, y, 2)
      return call(linen.Dense, ('features',), None, y, 2, name='head')

  x = jnp.ones((1, 2))
  variables = Outer().init(jax.random.PRNGKey(0), x)
  assert set(variables['params']) == {'Shift_0', 'Shift_1', 'head'}
  assert variables['params']['Shift_0']['Dense_0']['kernel'].shape == (2, 3)
  assert seen == [None]
  p = variables['params']
  y = Shift(3).apply({'params': p['Shift_0']}, x * 3.)
  y = Shift(2).apply({'params': p['Shift_1']}, y) + 1.
  y = linen.Dense(2).apply({'params': p['head']}, y)
  np.testing.assert_allclose(Outer().apply(variables, x), y, rtol=1e-6)


TODO_SRC = '''
from flax import nn


class Other(nn.Module):

  def apply(self, x, kernel_size, features=2):
    return nn.Conv(x, features, kernel_size)


def pick(kind):
  if kind == 'a':
    return LAYER
  def identity(x, *args, **kwargs):
    return x
  return identity


class Block(nn.Module):

  def apply(self, x, kind='a'):
    f = pick(kind)
    return CALL
'''


@pytest.mark.parametrize('layer,call,why', [
    ('nn.BatchNorm.partial(momentum=0.9)', 'f(x)',
     "without ['use_running_average'], which linen needs"),
    ('nn.BatchNorm.partial(use_running_average=True)', 'f(x, bias=False)',
     "spells 'bias' otherwise in linen ('use_bias')"),
    ('nn.GroupNorm', 'f(x)',
     'legacy GroupNorm, which this upgrade does not pass around'),
    ('nn.Conv.partial(kernel_size=(3, 3))', 'f(x, *args)',
     '*args / **kwargs only each class'),
    ('Other', 'f(x, 4)',
     'name the positional hyper-parameters differently'),
])
def test_what_cannot_be_split_keeps_a_todo(layer, call, why):
  src = TODO_SRC.replace('LAYER', layer).replace('CALL', call)
  if layer == 'Other':  # two classes naming position 1 differently
    src = src.replace("def identity(x, *args, **kwargs):\n    return x\n"
                      "  return identity",
                      'return nn.Conv.partial(kernel_size=(3, 3))')
  src = src.replace('*args)', '*kind)')
  new, _ = upgrade_source(textwrap.dedent(src))
  body = new.split('class Block')[1]
  assert why in body, body
  assert '_legacy_layer_call(' not in body, body


ENCODER = '''
import jax.numpy as jnp
from flax import nn
from layers import waves


def pick(kind):
  if kind == 'ln':
    return nn.LayerNorm.partial(epsilon=1e-3)
  def identity(x, name=None):
    del name
    return x
  return identity


class Encoder(nn.Module):

  def apply(self, x, kind='ln', shared=None):
    if shared is None:
      embed = nn.Embed.partial(num_embeddings=5, features=3,
                               embedding_init=waves)
    else:
      embed = shared
    x = embed(x)
    norm = pick(kind)
    x = norm(x)
    return nn.Dense(x, 2, kernel_init=waves)
'''

ENCODER_RUN = '''
import json
import jax
import jax.numpy as jnp
import numpy as np
import encoder

ids = jnp.array([[0, 3, 4], [2, 1, 1]])
out = {}
for kind in ('ln', 'none'):
  y, params = encoder.Encoder.partial(kind=kind).init(
      jax.random.PRNGKey(0), ids)
  flat = jax.tree_util.tree_flatten_with_path(params)[0]
  out[kind] = {'y': np.asarray(y).tolist(),
               'paths': sorted(jax.tree_util.keystr(p) for p, _ in flat)}
print(json.dumps(out))
'''


def test_partial_held_by_a_local_before_a_run_time_name(tmp_path):
  """A body whose auto-names are counted at run time (a value of a
  function or a class) still names the ``X.partial`` a local holds and
  calls once before that point: its construction draws the number (every
  earlier auto-named call written before it, its call after it); the
  upgraded program gives the legacy names and numbers (exactly, measured).
  Where a call between them, or a loop around the construction, would
  change the number, a TODO."""
  src, out, _ = upgrade_run.upgrade_dir(
      tmp_path, {'layers.py': LAYERS, 'encoder.py': ENCODER,
                 'run.py': ENCODER_RUN})
  code = (out / 'encoder.py').read_text()
  assert TODO not in code, code
  assert ("embed = nn.Embed(num_embeddings=5, features=3,\n"
          "                               embedding_init=waves, "
          "name=f'Embed_{next(legacy_autoname)}')") in code, code
  legacy = upgrade_run.run_json(src, ENCODER_RUN, off=False)
  run = (out / 'run.py').read_text()
  assert TODO not in run, run
  upgraded = upgrade_run.run_json(out, run, off=True)
  assert legacy == upgraded
  assert "['LayerNorm_1']['scale']" in legacy['ln']['paths']
  assert "['Dense_1']['kernel']" in legacy['none']['paths']
  for change in ('x = embed(nn.Dense(x, 3))',
                 'for i in range(2):\n      embed = nn.Embed.partial('
                 'num_embeddings=5, features=3)\n    x = embed(x)'):
    new, _ = upgrade_source(textwrap.dedent(
        ENCODER.replace('x = embed(x)', change)))
    assert TODO + ': embed holds X.partial(...)' in new, new


NORMS = '''
import jax
import jax.numpy as jnp
from flax import nn
from layers import waves


class Block(nn.Module):

  def apply(self, x, channels, norm_layer='group_norm', train=True):
    norm_name = ''
    if norm_layer == 'batch_norm':
      norm_layer = nn.BatchNorm.partial(use_running_average=not train)
      norm_name = 'bn'
    elif norm_layer == 'group_norm':
      norm_layer = nn.GroupNorm.partial(num_groups=2)
      norm_name = 'gn'
    y = norm_layer(x, name=f'{norm_name}1')
    y = jax.nn.relu(y)
    y = nn.Dense(y, channels, kernel_init=waves, name='fc')
    y = norm_layer(y, name=f'{norm_name}2')
    return x + y


class Group(nn.Module):

  def apply(self, x, channels, norm_layer='group_norm', train=True):
    for _ in range(2):
      x = Block(x, channels, norm_layer=norm_layer, train=train)
    return x


class Net(nn.Module):

  def apply(self, x, norm_layer='group_norm', train=True):
    norm_name = ''
    if norm_layer == 'batch_norm':
      norm_layer = nn.BatchNorm.partial(use_running_average=not train)
      norm_name = 'bn'
    elif norm_layer == 'group_norm':
      norm_layer = nn.GroupNorm.partial(num_groups=2)
      norm_name = 'gn'
    x = nn.Dense(x, 4, kernel_init=waves, name='stem')
    x = Group(x, 4, norm_layer=norm_layer, train=train, name='g1')
    x = norm_layer(x, name=f'{norm_name}')
    return nn.Dense(x, 3, kernel_init=waves, name='head')


def build(hparams):
  return Net.partial(norm_layer=hparams.get('norm_layer', 'group_norm'))
'''

# the choices a caller makes: by the string hyper-parameter, or a value of
# its own (the upgrade sees no caller: the value is unknown to it); each
# side spells the caller's layer in its own API
NORMS_RUN = '''
import json
import jax
import jax.numpy as jnp
import numpy as np
import norms
LAYER_SETUP

def caller_identity(x, name=None):
  del name
  return x * 0.5

x = jnp.cos(jnp.arange(2 * 3 * 4.0)).reshape((2, 3, 4))
out = {}
for key, value in [('batch_norm', 'batch_norm'), ('group_norm', 'group_norm'),
                   ('layer_norm', CALLER_LAYER),
                   ('identity', caller_identity)]:
  model = norms.build({'norm_layer': value})
  y, params = INIT
  flat = jax.tree_util.tree_flatten_with_path(params)[0]
  out[key] = {'y': np.asarray(y).tolist(),
              'paths': sorted(jax.tree_util.keystr(p) for p, _ in flat)}
try:
  model = norms.build({'norm_layer': 'no_norm'})
  INIT
except TypeError as e:
  out['no_norm'] = str(e)
print(json.dumps(out))
'''

def _norms_run(legacy):
  if legacy:
    setup = 'from flax import nn'
    layer = 'nn.LayerNorm.partial(epsilon=1e-3)'
    run = NORMS_RUN.replace('  y, params = INIT', '''\
  with nn.stateful():
    y, params = model.init(jax.random.PRNGKey(0), x)''')
    run = run.replace('  INIT\n', '''\
  with nn.stateful():
    model.init(jax.random.PRNGKey(0), x)
''')
  else:
    setup = 'import functools\nfrom flax import linen'
    layer = 'functools.partial(linen.LayerNorm, epsilon=1e-3)'
    run = NORMS_RUN.replace('  y, params = INIT', '''\
  y, variables = model().init_with_output(jax.random.PRNGKey(0), x)
  params = variables['params']''')
    run = run.replace('  INIT\n', '''\
  model().init(jax.random.PRNGKey(0), x)
''')
  return run.replace('LAYER_SETUP', setup).replace('CALLER_LAYER', layer)


def test_unknown_caller_value_next_to_layers_is_split_at_run_time(tmp_path):
  """gift's WideResnetBlock: ``norm_layer`` holds a BatchNorm or GroupNorm
  partial picked by a string, or whatever a caller passed (a value the
  upgrade cannot follow).  The run-time split serves any such value: a
  linen module class or partial of one (split by its fields, the legacy
  name), a function (called as written), anything else fails as legacy
  did (TypeError).  The upgraded program gives the legacy paths and
  outputs for every choice."""
  src, out, _ = upgrade_run.upgrade_dir(tmp_path, {'layers.py': LAYERS,
                                                   'norms.py': NORMS})
  code = (out / 'norms.py').read_text()
  assert TODO not in code, code
  assert ("y = _legacy_layer_call(norm_layer, (), None, x, "
          "name=f'{norm_name}1')") in code, code
  assert ("x = _legacy_layer_call(norm_layer, (), None, x, "
          "name=f'{norm_name}')") in code, code
  legacy = upgrade_run.run_json(src, _norms_run(True), off=False)
  upgraded = upgrade_run.run_json(out, _norms_run(False), off=True)
  assert set(legacy) == set(upgraded) == {
      'batch_norm', 'group_norm', 'layer_norm', 'identity', 'no_norm'}
  assert "object is not callable" in legacy['no_norm']
  assert "object is not callable" in upgraded['no_norm']
  for k in ('batch_norm', 'group_norm', 'layer_norm', 'identity'):
    a, b = legacy[k], upgraded[k]
    assert b['paths'] == a['paths'], k
    np.testing.assert_allclose(b['y'], a['y'], rtol=1e-5, atol=1e-6,
                               err_msg=k)
  assert "['g1']['Block_0']['1']['scale']" in legacy['layer_norm']['paths']
  assert legacy['layer_norm']['y'] != legacy['identity']['y']


@pytest.mark.parametrize('call', ['f(x, 4)', 'f(x, features=4)'])
def test_unknown_value_next_to_layers_positional_keeps_a_todo(call):
  """The known values name the positional hyper-parameters; a value the
  upgrade does not know may name them otherwise: a TODO that says so.
  By keyword, the run-time split serves any class."""
  src = textwrap.dedent('''
      from flax import nn


      class Block(nn.Module):

        def apply(self, x, conv=None):
          f = conv if conv is not None else nn.Dense.partial(bias=False)
          return CALL


      def build(conv):
        return Block.partial(conv=conv)
      ''').replace('CALL', call)
  new, _ = upgrade_source(src)
  body = new.split('class Block')[1]
  if call == 'f(x, 4)':
    assert 'a value the upgrade does not know' in body, body
    assert '_legacy_layer_call(' not in body, body
  else:
    assert TODO not in body, body
    assert "_legacy_layer_call(f, (), legacy_autoname, x, features=4)" in (
        body), body
