"""flaxlegacy upgrade: a hyper-parameter whose default is a module class
and which a caller the upgrade cannot follow may give another class
(rules/runtime_modules.py).

``Agent(network=Wide)`` by default, ``build(**kwargs)`` passing whatever
its caller gives: a call of ``network`` is rewritten by the default's
signature.  By keyword that is safe (another class splits a keyword
otherwise only where the rewritten call fails with a TypeError); by
position it is not: the default names the positions, and another class
may name the same positions otherwise (``Deep(x, depth, width)``): the
rewrite ran and computed another network, silently.  Such a call now
keeps a TODO that says why.
"""

import numpy as np

from tests import upgrade_run

TODO = '# TODO(flaxlegacy upgrade)'

NETS = '''
import jax.numpy as jnp
from flax import nn


def waves(key, shape, dtype=jnp.float32):
  del key
  n = 1
  for d in shape:
    n *= d
  return jnp.sin(jnp.arange(n, dtype=dtype) * 0.7).reshape(shape) * 0.3


class Wide(nn.Module):

  def apply(self, x, width, depth):
    for _ in range(depth):
      x = nn.Dense(x, width, kernel_init=waves)
    return x


class Deep(nn.Module):

  def apply(self, x, depth, width):
    for _ in range(depth):
      x = nn.Dense(x, width, kernel_init=waves)
    return x


class Agent(nn.Module):

  def apply(self, x, network=Wide):
    q = CALL
    return nn.Dense(q, 2, kernel_init=waves, name='head')


def build(**kwargs):
  return Agent.partial(**kwargs)
'''

# the caller: not in the upgraded tree (its class is unknown to the
# upgrade), one spelling per side
RUN = '''
import json
import jax
import jax.numpy as jnp
import numpy as np
import nets

x = jnp.cos(jnp.arange(2 * 5.0)).reshape((2, 5))
out = {}
for name in ('Wide', 'Deep'):
  model = nets.build(network=getattr(nets, name))
  INIT
  flat = jax.tree_util.tree_flatten_with_path(params)[0]
  out[name] = {'y': np.asarray(y).tolist(),
               'paths': sorted(jax.tree_util.keystr(p) + str(v.shape)
                               for p, v in flat)}
print(json.dumps(out))
'''
LEGACY_INIT = 'y, params = model.init(jax.random.PRNGKey(0), x)'
LINEN_INIT = ('y, variables = model().init_with_output('
              "jax.random.PRNGKey(0), x)\n  params = variables['params']")


def test_positional_call_of_a_default_class_with_unknown_values(tmp_path):
  """By position: a TODO naming the reason (before: ``self.network(width=3,
  depth=2, ...)(x)``, which built ``Deep`` with width 3 and depth 2 where
  legacy built depth 3, width 2: other parameter shapes and outputs, no
  error)."""
  _, out, _ = upgrade_run.upgrade_dir(
      tmp_path, {'nets.py': NETS.replace('CALL', 'network(x, 3, 2)')})
  code = (out / 'nets.py').read_text()
  assert (TODO + ": 'network' holds Wide by default and a value the "
          "upgrade does not know (a caller's): the hyper-parameters passed "
          'by position (width, depth) are named by Wide\'s signature') in (
              code), code
  assert 'self.network(x, 3, 2)' in code, code


def test_keyword_call_of_a_default_class_with_unknown_values(tmp_path):
  """By keyword the default's split serves the caller's class too: the
  legacy paths, shapes and outputs for both."""
  src, out, _ = upgrade_run.upgrade_dir(
      tmp_path, {'nets.py': NETS.replace('CALL',
                                         'network(x, depth=3, width=2)')})
  code = (out / 'nets.py').read_text()
  assert TODO not in code, code
  legacy = upgrade_run.run_json(src, RUN.replace('INIT', LEGACY_INIT),
                                off=False)
  upgraded = upgrade_run.run_json(out, RUN.replace('INIT', LINEN_INIT),
                                  off=True)
  assert set(legacy) == set(upgraded) == {'Wide', 'Deep'}
  for k, a in legacy.items():
    assert upgraded[k]['paths'] == a['paths'], k
    np.testing.assert_allclose(upgraded[k]['y'], a['y'], rtol=1e-6,
                               atol=1e-6, err_msg=k)
  assert "['Deep_0']['Dense_2']['kernel'](2, 2)" in legacy['Deep']['paths']
