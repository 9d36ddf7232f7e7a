"""flaxlegacy upgrade: ``self.state(name)`` with no shape whose handle is
only written (``tagged = self.state('tag'); tagged.value = x`` under
``self.is_stateful()``: modules that record activations into the
``nn.stateful`` collection) -> a linen variable of the stateful collection
(``batch_stats``, as the upgrade's ``nn.stateful`` rewrite), created on the
write.  A handle that is read, or bound twice, keeps the TODO (legacy's
getter raises before a write; linen's variable would not).
"""

import numpy as np

from tests.test_upgrade_port import _run_both
from tests.test_upgrade_port import _upgrade_dir

TODO = '# TODO(flaxlegacy upgrade)'

MODULES = '''\
    import jax.numpy as jnp
    from flax import nn


    class Tag(nn.Module):

      def apply(self, x):
        if self.is_stateful():
          tagged = self.state('tag')
          tagged.value = x
        return x


    class Net(nn.Module):

      def apply(self, x):
        y = nn.Dense(x, 3)
        Tag(jnp.mean(y), name='mean_y')
        return y
    '''

DRIVE = '''\
    import json, os
    import jax, jax.numpy as jnp, numpy as np
    import modules

    x = jnp.asarray(np.arange(8.0).reshape(2, 4) / 7.0, jnp.float32)
    if os.environ.get('FLAXLEGACY') == 'off':
      params = modules.Net().init(jax.random.PRNGKey(0), x)['params']
      params = jax.tree_util.tree_map(jnp.ones_like, params)
      y, state = modules.Net().apply({'params': params}, x,
                                     mutable=['batch_stats'])
      tag = state['batch_stats']['mean_y']['tag']
      plain = modules.Net().apply({'params': params}, x)
    else:
      from flax import nn
      _, params = modules.Net.init(jax.random.PRNGKey(0), x)
      params = jax.tree_util.tree_map(jnp.ones_like, params)
      with nn.stateful() as state:
        y = modules.Net.call(params, x)
      tag = state.as_dict()['/mean_y']['tag']
      plain = modules.Net.call(params, x)
    print(json.dumps({'y': np.asarray(y).tolist(), 'tag': float(tag),
                      'plain': np.asarray(plain).tolist()}))
    '''


def test_written_state_handle_source(tmp_path):
  _, out, status, _ = _upgrade_dir(tmp_path, {'modules.py': MODULES})
  assert status == 0
  text = (out / 'modules.py').read_text()
  assert TODO not in text
  assert "self.is_mutable_collection('batch_stats')" in text  # is_stateful()
  assert "tagged = self.variable('batch_stats', 'tag', lambda: None)" in text
  assert 'tagged.value = x' in text


def test_read_state_handle_keeps_the_todo(tmp_path):
  src = MODULES.replace('''\
          tagged.value = x
''', '''\
          tagged.value = x
          x = tagged.value
''')
  _, out, status, _ = _upgrade_dir(tmp_path, {'modules.py': src})
  assert status == 0
  text = (out / 'modules.py').read_text()
  assert f'{TODO}: self.state with an explicit collection or no shape' in (
      text)


def test_written_state_handle_numbers(tmp_path):
  legacy, upgraded, _ = _run_both(tmp_path, {'modules.py': MODULES}, DRIVE)
  np.testing.assert_allclose(upgraded['y'], legacy['y'], rtol=1e-6)
  np.testing.assert_allclose(upgraded['tag'], legacy['tag'], rtol=1e-6)
  np.testing.assert_allclose(upgraded['plain'], legacy['y'], rtol=1e-6)
  assert abs(legacy['tag']) > 0.1
