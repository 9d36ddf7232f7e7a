"""flaxlegacy upgrade: ``X.shared(...)`` that binds call parameters of X.

Legacy ``.shared`` bound any keyword of ``apply`` for every call of the
shared instance (a call's own keyword winning); transformer code binds the
padding mask / segmentation of a block shared across layers (tied weights,
long-range-arena's TLB blocks built in a loop and called later).  Linen's
split makes those ``__call__`` parameters, so the rewrite is one instance
wrapped in ``functools.partial`` with them; it runs with the layer off and
gives the legacy numbers (deterministic initializers: linen derives
parameter keys apart).
"""

import numpy as np

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


class Block(nn.Module):

  def apply(self, x, features=4, mask=None, scale=1.0):
    y = nn.Dense(x, features, kernel_init=waves, name='dense') * scale
    if mask is not None:
      y = y * jnp.asarray(mask)  # an array: a call parameter in linen
    return x + y


class Encoder(nn.Module):

  def apply(self, x, depth=2):
    mask = (x > 0).astype(jnp.float32)  # a padding mask, as transformers do
    blocks = []
    for i in range(depth):
      blocks.append(Block.shared(features=x.shape[-1], mask=mask,
                                 name=f'block_{i}'))
    for blk in blocks:
      x = blk(x)
    x = blocks[0](x, mask=1.0 - mask)  # a call's own keyword wins
    return x
'''

RUN = '''
import json
import jax
import jax.numpy as jnp
import numpy as np
from flax import nn
import model

x = jnp.cos(jnp.arange(24.0)).reshape((2, 3, 4))
y, params = model.Encoder.init(jax.random.PRNGKey(0), x)
flat = jax.tree_util.tree_flatten_with_path(params)[0]
print(json.dumps({'y': np.asarray(y).tolist(),
                  'paths': sorted(jax.tree_util.keystr(p) for p, _ in flat)}))
'''

UPGRADED_RUN = RUN.replace('from flax import nn\n', '').replace(
    'y, params = model.Encoder.init(jax.random.PRNGKey(0), x)',
    "y, v = model.Encoder().init_with_output(jax.random.PRNGKey(0), x)"
    "\nparams = v['params']")


def test_shared_binding_call_parameters(tmp_path):
  src, out, _ = upgrade_run.upgrade_dir(tmp_path, {'model.py': MODEL})
  code = (out / 'model.py').read_text()
  assert TODO not in code, code
  assert 'functools.partial(Block(' in code, code
  legacy = upgrade_run.run_json(src, RUN, off=False)
  upgraded = upgrade_run.run_json(out, UPGRADED_RUN, off=True,
                                  legacy_stream=True)
  assert upgraded['paths'] == legacy['paths']
  np.testing.assert_allclose(upgraded['y'], legacy['y'], rtol=1e-6,
                             atol=1e-6)


def test_shared_binding_a_positional_call_parameter_keeps_todo(tmp_path):
  model = MODEL.replace(
      "Block.shared(features=x.shape[-1], mask=mask,",
      "Block.shared(x, features=x.shape[-1],")
  _, out, _ = upgrade_run.upgrade_dir(tmp_path, {'model.py': model})
  code = (out / 'model.py').read_text()
  assert TODO in code, code
