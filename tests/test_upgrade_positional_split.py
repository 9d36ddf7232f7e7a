"""flaxlegacy upgrade: positional arguments of ``init`` / ``init_by_shape``.

``init_by_shape``'s positional arguments after the input specs are the
later ``apply`` inputs (they were dropped), and a positional ``init``
argument whose parameter is a field becomes a constructor keyword.  Runs
with the layer off and gives the legacy numbers (deterministic
initializers: linen derives parameter keys apart).

Not here: a parameter ahead of a required input that reads as a
hyper-parameter (NeRF-style ``apply(self, x, origins, directions, views)``
with origins / directions only handed to helpers) stays a field, so a
caller passing it positionally fails upgraded; moving every such parameter
to ``__call__`` turned real hyper-parameters ahead of an ``rng`` input into
inputs (dopamine's quantile network), so that rule was withdrawn
(docs/corpus.md, jaxnerf).
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
