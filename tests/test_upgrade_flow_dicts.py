"""flaxlegacy upgrade, flow.py: values through the keys of a dict.

init2winit keeps every state of a run in one dict (its checkpoint pytree:
``{'flax_module': model, 'optimizer_state': ..., 'batch_stats': state}``)
and reads it back by key (``pytree_dict['batch_stats']``).  flow.py knew
each key's values (``d.update``, ``f(**d)`` read them) but ``d['k']`` read
the values of every key, so ``batch_stats`` held the model too, and each
function it reached was left with a TODO "a legacy model in some runs and
a collection in others" (~30 of them over trainer.py, base_model.py,
model_utils.py ...).  Now ``d['k']`` of a dict whose keys the facts follow
(a ``{...}`` display, ``dict(...)``, ``**kwargs``) reads what 'k' and the
keys not known there hold; iterating or unpacking such a dict gives its
keys (``a, b, c = results[0]`` of init2winit's eval_utils, where results[0]
may be that dict), ``d.values()`` its values.  A key the facts cannot name
(``d[name] = v``) still reaches every ``d['k']``, and a dict comprehension
or a list still gives all its values: where a value can be either, the
TODO stays.
"""

import json
import os
import subprocess
import sys
import textwrap

import libcst as cst
import numpy as np

from flaxlegacy.upgrade import api
from flaxlegacy.upgrade import flow as flow_lib

TODO = 'TODO(flaxlegacy upgrade)'

# the init2winit pattern in a few lines: trainer.initialize returns
# (model, batch_stats); _replicate_and_maybe_restore_latest_checkpoint puts
# both in one dict and returns them by key; evaluate / update take them
PROGRAM = '''\
    import json

    import jax
    import jax.numpy as jnp
    from flax import nn


    class Net(nn.Module):

      def apply(self, x, train=True):
        x = nn.Dense(x, 3, kernel_init=nn.initializers.ones)
        return nn.BatchNorm(x, use_running_average=not train, name='bn')


    def initialize(rng):
      with nn.stateful() as batch_stats:
        _, params = Net.init_by_shape(rng, [((2, 4), jnp.float32)])
      return nn.Model(Net, params), batch_stats


    def restore(model, batch_stats):
      # one dict of every state (init2winit's checkpoint pytree)
      pytree = {'model': model, 'batch_stats': batch_stats}
      return pytree['model'], pytree['batch_stats']


    def train_step(model, batch_stats, x):
      with nn.stateful(batch_stats) as new_batch_stats:
        model(x)
      return new_batch_stats


    def evaluate(model, batch_stats, x):
      with nn.stateful(batch_stats, mutable=False):
        return model(x, train=False)


    def run():
      model, batch_stats = initialize(jax.random.PRNGKey(0))
      model, batch_stats = restore(model, batch_stats)
      x = jnp.arange(8.0).reshape(2, 4) ** 2 / 7.0
      batch_stats = train_step(model, batch_stats, x)
      return evaluate(model, batch_stats, x).tolist()


    if __name__ == '__main__':
      print(json.dumps(run()))
    '''


def _flow(files):
  sfs = []
  for rel, text in files.items():
    sf = api.SourceFile('/nowhere', rel, rel)
    sf.code = textwrap.dedent(text)
    sf.module = cst.parse_module(sf.code)
    sfs.append(sf)
  return api._analyse(sfs).flow  # pylint: disable=protected-access


def _kinds(values):
  return sorted({v[0] for v in values})


def test_a_dict_read_by_key_gives_that_key_s_values():
  flow = _flow({'prog.py': PROGRAM})
  # before: each held the model and the collection
  assert flow.param_values('prog.py', 'train_step', 'batch_stats') == (
      frozenset({flow_lib.COLLECTION}))
  for qual in ('train_step', 'evaluate'):
    assert _kinds(flow.param_values('prog.py', qual, 'model')) == ['model']


HELPERS = '''\
    from flax import nn
    import jax.numpy as jnp


    class Net(nn.Module):

      def apply(self, x):
        return nn.Dense(x, 3)


    def make():
      with nn.stateful() as state:
        _, params = Net.init_by_shape(None, [((2, 4), jnp.float32)])
      return nn.Model(Net, params), state
    '''


def test_unpacking_or_iterating_a_dict_gives_its_keys():
  # init2winit's eval_utils: one restore function for two callers, one
  # passing a dict and one a tuple; the tuple's caller unpacks results[0]
  prog = HELPERS + '''

    def restore(tree):
      return tree, 0


    def by_key(model, state):
      tree, _ = restore({'model': model, 'state': state})
      return tree['model'], tree['state']


    def by_position(model, state):
      results = restore((model, state))
      model2, state2 = results[0]
      return model2, state2


    def loops(model, state):
      table = {'model': model, 'state': state}
      for key in table:
        pass
      for value in table.values():
        pass
      first, second = table.values()
      return key, value, first, second


    def main():
      model, state = make()
      by_key(model, state)
      by_position(model, state)
      loops(model, state)
    '''
  flow = _flow({'prog.py': prog})

  def values(qual, name):
    return flow.name_values('prog.py', qual, name)

  # unpacking the dict gives its keys, the tuple its elements: no model in
  # state2 (before: the dict's values, the model among them)
  assert _kinds(values('by_position', 'state2')) == ['collection', 'other']
  assert _kinds(values('by_position', 'model2')) == ['model', 'other']
  assert values('loops', 'key') == frozenset({flow_lib.OTHER})
  # d.values(): the values, iterated or unpacked
  assert _kinds(values('loops', 'value')) == ['collection', 'model']
  assert _kinds(values('loops', 'first')) == ['collection', 'model']


def test_a_key_not_known_here_keeps_every_value():
  prog = HELPERS + '''

    def keyed(model, state, name):
      d = {'model': model}
      d[name] = state
      return d['model']


    def comprehension(model, state):
      d = {k: v for k, v in (('model', model), ('state', state))}
      return d['state']


    def main(name):
      model, state = make()
      keyed(model, state, name)
      comprehension(model, state)
    '''
  flow = _flow({'prog.py': prog})
  # d[name] = state may be d['model']: it can be either
  assert _kinds(flow.values_of('prog.py', 'keyed', cst.parse_expression(
      "d['model']"))) == ['collection', 'model']
  # a dict comprehension's keys are not followed: every value
  assert _kinds(flow.values_of('prog.py', 'comprehension',
                               cst.parse_expression("d['state']"))) == [
                                   'collection', 'model']


def _run(folder, off):
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  if off:
    env['FLAXLEGACY'] = 'off'
  proc = subprocess.run([sys.executable, 'prog.py'], cwd=str(folder),
                        env=env, capture_output=True, text=True, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


def test_state_read_back_by_key_is_upgraded_and_matches_legacy(tmp_path):
  src = tmp_path / 'src'
  src.mkdir()
  (src / 'prog.py').write_text(textwrap.dedent(PROGRAM))
  out = tmp_path / 'out'
  status, _ = api.upgrade_paths([str(src)], out=str(out))
  assert status == 0
  new = (out / 'prog.py').read_text()
  assert TODO not in new, new
  flat = ' '.join(new.split())
  assert ("_, new_batch_stats = legacy_model.apply_model({'params': model, "
          "**batch_stats}, x, mutable=['batch_stats'])") in flat, new
  assert ("return legacy_model.apply_model({'params': model, **batch_stats}, "
          'x, train=False)') in flat, new
  legacy = _run(src, off=False)
  upgraded = _run(out, off=True)
  np.testing.assert_allclose(upgraded, legacy, rtol=1e-6)
  # the evaluation read the running statistics the training step moved,
  # not the ones init made (a mean of 0 and a variance of 1: the row sums
  # of x, 2 and 18)
  assert not np.allclose(legacy, [[2.0] * 3, [18.0] * 3], atol=1e-2), legacy
