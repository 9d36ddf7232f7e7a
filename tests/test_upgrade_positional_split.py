"""flaxlegacy upgrade: a parameter ahead of a required call parameter is one.

The field / call split reads how ``apply`` uses each parameter; one that the
body only hands on as a later argument of a function of the codebase
(``render(key, origins, directions)``) reads as a hyper-parameter.  But
linen's ``__call__`` keeps legacy's positional order, and a legacy caller
that passes a later required input positionally passes this one
positionally too (``Model.init(rng, x, origins, y)``): as a field it shifted
every later argument, and the upgraded init raised TypeError (NeRF-style
ray models: origins and directions passed on to sampling helpers, view
directions normalized in the body).  Runs with the layer off and gives the
legacy numbers (deterministic initializers: linen derives parameter keys
apart).
"""

from tests import upgrade_run

TODO = '# TODO(flaxlegacy upgrade)'

MODEL = '''
import jax.numpy as jnp
from flax import nn


def waves(key, shape, dtype=jnp.float32):
  del key
  n = 1
  for d in shape:
    n *= d
  return jnp.sin(jnp.arange(n, dtype=dtype) * 0.9).reshape(shape)


def march(x, origins, directions, scale):
  return x * scale + origins * directions


class Model(nn.Module):

  def apply(self, x, origins, directions, views, scale=2.0, features=3):
    h = nn.Dense(march(x, origins, directions, scale), features,
                 kernel_init=waves)
    return h + jnp.sum(views / jnp.linalg.norm(views))
'''

RUN = '''
import json
import jax
import jax.numpy as jnp
import numpy as np
from flax import nn
import model

x = jnp.cos(jnp.arange(8.0)).reshape((2, 4))
o, d, v = x + 1.0, x * 0.5, jnp.sin(x)
y, params = model.Model.partial(features=5).init(jax.random.PRNGKey(0), x, o, d, v)
m = nn.Model(model.Model.partial(features=5), params)
z = m(x, o, d, v)
flat = jax.tree_util.tree_flatten_with_path(params)[0]
print(json.dumps({'y': np.asarray(y).tolist(), 'z': np.asarray(z).tolist(),
                  'paths': sorted(jax.tree_util.keystr(p) for p, _ in flat)}))
'''


def test_parameter_ahead_of_a_required_input_is_an_input(tmp_path):
  src, out, report = upgrade_run.upgrade_dir(
      tmp_path, {'model.py': MODEL, 'run.py': RUN})
  code = (out / 'model.py').read_text()
  assert TODO not in code, code
  # origins / directions are __call__ parameters, in legacy's order;
  # scale and features (defaults, after the inputs) stay fields
  assert 'def __call__(self, x, origins, directions, views)' in code, code
  assert 'scale: float = 2.0' in code, code
  legacy = upgrade_run.run_json(src, RUN, off=False)
  upgraded = upgrade_run.run_json(out, (out / 'run.py').read_text(),
                                  off=True)
  assert upgraded['paths'] == legacy['paths']
  assert upgraded['y'] == legacy['y']
  assert upgraded['z'] == legacy['z']


SCALED = MODEL + '''

class Scaled(nn.Module):

  def apply(self, x, y, scale=1.0):
    return nn.Dense(x * jnp.sum(y), 2, kernel_init=waves) * scale
'''

SCALED_RUN = '''
import json
import jax
import jax.numpy as jnp
import numpy as np
import model

out, params = model.Scaled.init_by_shape(
    jax.random.PRNGKey(0), [((2, 4), jnp.float32)], jnp.ones(3), 3.0)
flat = jax.tree_util.tree_flatten_with_path(params)[0]
print(json.dumps({'shape': list(out.shape),
                  'leaves': {jax.tree_util.keystr(p): np.asarray(v).tolist()
                             for p, v in flat}}))
'''


def test_init_by_shape_positional_arguments_after_the_specs(tmp_path):
  # legacy init_by_shape(rng, specs, *args): apply(*shaped inputs, *args);
  # the upgrade dropped args (the init raised TypeError: y missing)
  src, out, _ = upgrade_run.upgrade_dir(
      tmp_path, {'model.py': SCALED, 'run.py': SCALED_RUN})
  code = (out / 'run.py').read_text()
  assert TODO not in code, code
  assert ('model.Scaled(scale=3.0).init_with_output(jax.random.PRNGKey(0), '
          'jnp.ones((2, 4), jnp.float32), jnp.ones(3))') in code, code
  legacy = upgrade_run.run_json(src, SCALED_RUN, off=False)
  upgraded = upgrade_run.run_json(out, code, off=True)
  assert upgraded == legacy
