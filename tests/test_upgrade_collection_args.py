"""flaxlegacy upgrade: explicit state collections that are None in every run.

Legacy normalisation layers take an optional collection to keep their
running statistics in (``nn.BatchNorm(x, batch_stats=batch_stats)``,
``self.state(name, shape, init, collection=batch_stats)``); None, the
default, means the ``nn.stateful`` context's collection, which is linen's
``batch_stats``.  Research code threads such an argument through every
module and never sets it: where flow.py shows it is None in every run the
argument is dropped (linen's collection is the one legacy used); else a
TODO as before.  ``self.is_stateful()`` is True in evaluation too
(``nn.stateful(state, mutable=False)``): linen's reading is "the collection
is mutable, or was given".  Upgraded code runs with FLAXLEGACY=off and is
compared with the legacy code under the layer (flaxlegacy.upgrade.verify).
"""

import textwrap

from flaxlegacy.upgrade import upgrade_paths
from flaxlegacy.upgrade import verify

LAYERS = '''\
    from flax import nn
    import jax.numpy as jnp


    class RunningMean(nn.Module):
      """Subtracts a mean kept in an explicit (optional) collection."""

      def apply(self, x, use_running_average=False, batch_stats=None,
                momentum=0.9):
        if self.is_stateful() or batch_stats:
          ra_mean = self.state('mean', (x.shape[-1],), nn.initializers.zeros,
                               collection=batch_stats)
        else:
          ra_mean = None
        if use_running_average:
          if ra_mean is None:
            raise ValueError('no state')
          mean = ra_mean.value
        else:
          mean = x.mean(0)
          if ra_mean is not None and not self.is_initializing():
            ra_mean.value = momentum * ra_mean.value + (1 - momentum) * mean
        return x - mean


    class Net(nn.Module):

      def apply(self, x, train=True, batch_stats=None):
        # deterministic parameters: the evaluation test compares the two
        # sides' own initialisations
        x = nn.Dense(x, 4, kernel_init=nn.initializers.ones)
        x = nn.BatchNorm(x, batch_stats=batch_stats,
                         use_running_average=not train, name='bn')
        return RunningMean(x, use_running_average=not train,
                           batch_stats=batch_stats, name='rm')
    '''

PROGRAM = '''\
    import jax
    import jax.numpy as jnp
    from flax import nn

    import layers


    def init():
      with nn.stateful() as state:
        _, params = layers.Net.init_by_shape(jax.random.PRNGKey(0),
                                             [((2, 3), jnp.float32)])
      return params, state
    '''


def _upgrade(tmp_path, files):
  src = tmp_path / 'src'
  src.mkdir()
  for rel, text in files.items():
    (src / rel).write_text(textwrap.dedent(text))
  out = tmp_path / 'out'
  status, _ = upgrade_paths([str(src)], out=str(out))
  assert status == 0
  return src, out


def test_collection_none_in_every_run_is_dropped(tmp_path):
  _, out = _upgrade(tmp_path, {'layers.py': LAYERS, 'prog.py': PROGRAM})
  new = (out / 'layers.py').read_text()
  assert 'TODO' not in new, new
  assert "self.variable('batch_stats', 'mean'," in new, new
  assert 'collection=' not in new, new
  flat = ' '.join(new.split())
  assert ('nn.BatchNorm(use_running_average=not self.train, name=\'bn\')(x)'
          in flat), new
  assert ("(self.is_mutable_collection('batch_stats') or 'batch_stats' in "
          'self.variables)') in flat, new


def test_collection_given_somewhere_keeps_its_todo(tmp_path):
  prog = PROGRAM + '''

    def with_collection(x, params):
      with nn.stateful() as state:
        return layers.Net.call(params, x, batch_stats=state)
    '''
  _, out = _upgrade(tmp_path, {'layers.py': LAYERS, 'prog.py': prog})
  new = (out / 'layers.py').read_text()
  assert ('TODO(flaxlegacy upgrade): explicit batch_stats collections have '
          'no linen argument') in new, new
  assert 'TODO(flaxlegacy upgrade): self.state with an explicit collection' in (
      new), new


def test_collection_numbers_match_legacy_in_training_and_evaluation(
    tmp_path):
  src, out = _upgrade(tmp_path, {'layers.py': LAYERS, 'prog.py': PROGRAM})
  checks = [dict(class_name='Net', inputs=[((5, 3), 'float32')],
                 hyper={'train': train}, fields=['train', 'batch_stats'],
                 call=[])
            for train in (True, False)]
  res = verify.verify_modules(str(src / 'layers.py'),
                              str(out / 'layers.py'), checks)
  assert [r['status'] for r in res] == ['ok', 'ok'], res


EVAL_LEGACY = '''\
import json, sys
import jax, jax.numpy as jnp
from flax import nn
import layers
with nn.stateful() as state:
  _, params = layers.Net.init_by_shape(jax.random.PRNGKey(0),
                                       [((2, 3), jnp.float32)])
x = jnp.arange(15.0).reshape(5, 3) ** 2 / 7.0
with nn.stateful(state) as new_state:
  layers.Net.call(params, x)            # training: the statistics move
with nn.stateful(new_state, mutable=False):
  y = layers.Net.call(params, x, train=False)
print(json.dumps(jax.tree_util.tree_map(lambda a: a.tolist(), y)))
'''

EVAL_UPGRADED = '''\
import json, sys
import jax, jax.numpy as jnp
import layers
variables = layers.Net().init(jax.random.PRNGKey(0), jnp.ones((2, 3)))
x = jnp.arange(15.0).reshape(5, 3) ** 2 / 7.0
_, new_state = layers.Net().apply(variables, x, mutable=['batch_stats'])
y = layers.Net(train=False).apply({**variables, **new_state}, x)
print(json.dumps(jax.tree_util.tree_map(lambda a: a.tolist(), y)))
'''


def _run(folder, script, off):
  import json  # pylint: disable=g-import-not-at-top
  import os  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  if off:
    env['FLAXLEGACY'] = 'off'
  proc = subprocess.run([sys.executable, '-c', script], cwd=str(folder),
                        env=env, capture_output=True, text=True, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


def test_evaluation_reads_the_state_it_is_given(tmp_path):
  """Evaluation with the state given but not mutable: legacy is_stateful()
  is True there, and the layer reads its running mean."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  src, out = _upgrade(tmp_path, {'layers.py': LAYERS, 'prog.py': PROGRAM})
  legacy = _run(src, EVAL_LEGACY, off=False)
  upgraded = _run(out, EVAL_UPGRADED, off=True)
  np.testing.assert_allclose(upgraded, legacy, rtol=1e-5, atol=1e-6)


AS_DICT = '''\
    import json
    import jax
    import jax.numpy as jnp
    from flax import nn


    class Net(nn.Module):

      def apply(self, x, train=True):
        x = nn.Dense(x, 4, kernel_init=nn.initializers.ones)
        return nn.BatchNorm(x, use_running_average=not train, name='bn')


    class Report(object):

      def as_dict(self):
        return {'a': 1}


    def run():
      with nn.stateful() as batch_stats:
        _, _ = Net.init_by_shape(jax.random.PRNGKey(0),
                                 [((2, 3), jnp.float32)])
      report = Report()
      return bool(batch_stats.as_dict()), report.as_dict()


    if __name__ == '__main__':
      print(json.dumps(run()))
    '''


def test_as_dict_of_a_collection_found_by_what_it_holds(tmp_path):
  """``batch_stats.as_dict()``: not a ``*_state`` name, but flow.py says
  it holds an nn.Collection (the dict of collections now): ``as_dict()``
  becomes legacy's flat dict of it; ``as_dict()`` of a plain object
  stays."""
  src, out = _upgrade(tmp_path, {'prog.py': AS_DICT})
  new = (out / 'prog.py').read_text()
  assert ('return bool(legacy_model.collection_dict(batch_stats)), '
          'report.as_dict()') in new, new
  assert 'TODO' not in new, new
  run = 'import runpy; runpy.run_path("prog.py", run_name="__main__")'
  assert _run(src, run, off=False) == _run(out, run, off=True) == [
      True, {'a': 1}]
