"""flaxlegacy upgrade: ``@gin.configurable("Name")`` on a legacy ``apply``
(and ``@nn.module @gin.configurable def f``) goes on the linen class, where
that is certain (collectors/gin_classes.py; gfsa's layers).

Legacy gin wrapped ``apply`` and gave the hyper-parameters each time it
ran; upgraded, they are dataclass fields, which gin gives when it wraps the
class (its dataclass ``__init__``), where the module is built -- inside
the parent's compact call, so in the same ``gin.config_scope`` as legacy.
A ``__call__`` parameter only gin gives (a binding names it, a
``gin.REQUIRED`` default, or no default and a call that leaves it out)
becomes a field.  Before, the decorator stayed on ``__call__`` with a TODO:
the codebase's own ``gin.parse_config`` failed ("doesn't have a parameter
named").  Real gin-config runs both sides here (legacy under the layer,
upgraded with FLAXLEGACY=off).
"""

import numpy as np
import pytest

from tests import upgrade_run

gin = pytest.importorskip('gin')

TODO = '# TODO(flaxlegacy upgrade)'

LAYERS = '''\
    import gin
    import jax.numpy as jnp
    from flax import nn


    def waves(key, shape, dtype=jnp.float32):
      # deterministic: legacy and linen derive submodule keys apart
      del key
      n = 1
      for d in shape:
        n *= d
      return jnp.sin(jnp.arange(n, dtype=dtype) * 0.7).reshape(shape) * 0.3


    class Scaled(nn.Module):
      """A dense layer whose size gin gives (a gin.REQUIRED default)."""

      @gin.configurable("Scaled")
      def apply(self, x, features=gin.REQUIRED, scale=2.0):
        return scale * nn.Dense(x, features, kernel_init=waves, name='dense')


    class Stack(nn.Module):
      """``dims`` has no default and is indexed (a __call__ parameter by
      the split); only gin gives it (gfsa's NRIEdgeLayer.mlp_vtoe_dims)."""

      @gin.configurable("Stack")
      def apply(self, x, mask, dims):
        x = nn.Dense(x, dims[0], kernel_init=waves, name='first')
        for i, d in enumerate(dims[1:]):
          x = nn.Dense(jnp.tanh(x), d, kernel_init=waves, name=f'more_{i}')
        return x * mask


    @nn.module
    @gin.configurable
    def steps(x, layers=gin.REQUIRED, width=3):
      for i in range(layers):
        x = jnp.tanh(nn.Dense(x, width, kernel_init=waves, name=f'step_{i}'))
      return x


    class Net(nn.Module):

      def apply(self, x):
        a = Scaled(x, name='plain')
        with gin.config_scope('enc'):
          b = Scaled(x, name='scoped')
        c = Stack(x, mask=0.5, name='stack')
        d = steps(x, name='steps')
        return jnp.concatenate([a, b, c, d], axis=-1)


    def configure():
      gin.clear_config()
      gin.parse_config("""
    Scaled.features = 2
    enc/Scaled.features = 3
    enc/Scaled.scale = 0.5
    Stack.dims = [4, 2]
    steps.layers = 2
    """)
    '''

FILES = {'layers.py': LAYERS}

LEGACY_RUN = '''
import json
import gin
import jax
import jax.numpy as jnp
import numpy as np
import layers

layers.configure()
x = jnp.cos(jnp.arange(6, dtype=jnp.float32)).reshape(2, 3)
y, params = layers.Net.init(jax.random.PRNGKey(0), x)
y2 = layers.Net.call(params, x)
flat = jax.tree_util.tree_flatten_with_path(params)[0]
out = {'y': np.asarray(y).tolist(), 'y2': np.asarray(y2).tolist(),
       'paths': sorted(jax.tree_util.keystr(p) for p, _ in flat)}
gin.clear_config()
try:
  layers.Scaled.init(jax.random.PRNGKey(0), x)
  out['unbound'] = None
except Exception as e:  # gin's error for a missing required binding
  out['unbound'] = [type(e).__name__, str(e).splitlines()[0]]
print(json.dumps(out))
'''

UPGRADED_RUN = '''
import json
import gin
import jax
import jax.numpy as jnp
import numpy as np
import layers

layers.configure()
x = jnp.cos(jnp.arange(6, dtype=jnp.float32)).reshape(2, 3)
y, variables = layers.Net().init_with_output(jax.random.PRNGKey(0), x)
y2 = layers.Net().apply(variables, x)
flat = jax.tree_util.tree_flatten_with_path(variables['params'])[0]
out = {'y': np.asarray(y).tolist(), 'y2': np.asarray(y2).tolist(),
       'paths': sorted(jax.tree_util.keystr(p) for p, _ in flat),
       'flaxlegacy': __import__('sys').modules.get('flaxlegacy') is not None}
gin.clear_config()
try:
  layers.Scaled().init(jax.random.PRNGKey(0), x)
  out['unbound'] = None
except Exception as e:
  out['unbound'] = [type(e).__name__, str(e).splitlines()[0]]
print(json.dumps(out))
'''


def _class_block(text, name):
  lines = text.splitlines()
  at = next(i for i, l in enumerate(lines) if l.startswith(f'class {name}('))
  start = at
  while start > 0 and lines[start - 1].startswith(('#', '@')):
    start -= 1
  end = next((i for i in range(at + 1, len(lines))
              if lines[i].startswith(('class ', '@', 'def '))), len(lines))
  return lines[start:at], lines[at:end]


@pytest.fixture(scope='module')
def upgraded(tmp_path_factory):
  tmp = tmp_path_factory.mktemp('gin_classes')
  src, out, report = upgrade_run.upgrade_dir(tmp, FILES)
  return src, out, report


def test_gin_decorator_goes_on_the_class(upgraded):
  _, out, report = upgraded
  text = (out / 'layers.py').read_text()
  for name, dec in (('Scaled', '@gin.configurable("Scaled")'),
                    ('Stack', '@gin.configurable("Stack")'),
                    ('steps', '@gin.configurable')):
    above, body = _class_block(text, name)
    assert above[-1] == dec, (name, above)
    assert not any(l.startswith(TODO) for l in above), (name, above)
    assert not any(l.strip().startswith('@gin') for l in body), (name, body)
  assert not report['files']['layers.py']['left']
  # the gin-only __call__ parameter is a field now; the input stays on
  # __call__
  _, body = _class_block(text, 'Stack')
  assert '  dims: Any' in body, body
  assert any('def __call__(self, x)' in l for l in body), body


def test_gin_bindings_give_the_fields_as_legacy(upgraded):
  """Unscoped and scoped bindings, a gin.REQUIRED default, a gin-only
  parameter made a field, an @nn.module function: the legacy numbers (and
  parameter tree), and gin's error where a required binding is missing."""
  src, out, _ = upgraded
  legacy = upgrade_run.run_json(src, LEGACY_RUN, off=False)
  got = upgrade_run.run_json(out, UPGRADED_RUN, off=True)
  assert got.pop('flaxlegacy') is False
  assert got['paths'] == legacy['paths']
  assert len(legacy['y'][0]) == 2 + 3 + 2 + 3  # the bindings were used
  for k in ('y', 'y2'):
    np.testing.assert_allclose(got[k], legacy[k], rtol=1e-6, atol=1e-6)
  assert legacy['unbound'] == [
      'RuntimeError',
      "Required bindings for `Scaled` not provided in config: ['features']"]
  assert got['unbound'] == legacy['unbound']


UNCERTAIN = '''\
    import gin
    from flax import nn


    class Positional(nn.Module):
      """``dims`` is bound by gin and passed positionally in Net."""

      @gin.configurable("Positional")
      def apply(self, x, dims):
        return nn.Dense(x, dims[0], name='d')


    class Base(nn.Module):
      """Subclassed: linen writes the subclass an __init__ of its own."""

      @gin.configurable("Base")
      def apply(self, x, features=gin.REQUIRED):
        return nn.Dense(x, features, name='d')


    class Sub(Base):
      pass


    class Outside(nn.Module):
      """No binding of the codebase names it (the config is elsewhere) and
      a call leaves out ``mask``, a __call__ parameter with a default."""

      @gin.configurable("Outside")
      def apply(self, x, mask=None, features=gin.REQUIRED):
        if mask is not None:
          x = x * mask[0]
        return nn.Dense(x, features, name='d')


    class Net(nn.Module):

      def apply(self, x):
        x = Positional(x, [3])
        return Outside(x)


    def configure():
      gin.parse_config("""
    Positional.dims = [2]
    Base.features = 3
    """)
    '''


@pytest.mark.parametrize('name, why', [
    ('Positional', "gin can give 'dims'"),
    ('Base', 'it has subclasses'),
    ('Outside', "a gin binding from outside the codebase may give 'mask'"),
])
def test_uncertain_keeps_the_decorator_on_call_with_a_todo(tmp_path, name,
                                                           why):
  _, out, _ = upgrade_run.upgrade_dir(tmp_path, {'layers.py': UNCERTAIN})
  text = (out / 'layers.py').read_text()
  above, body = _class_block(text, name)
  assert any(l.startswith(TODO) and why in l for l in above), above
  assert not any(l.startswith('@gin') for l in above), above
  at = next(i for i, l in enumerate(body) if 'def __call__(' in l)
  assert body[at - 1].strip().startswith('@gin.configurable'), body
