"""Drives google-research's ipagnn (flax.nn graph and sequence models) on CPU.

Written for flaxlegacy's checks (not part of ipagnn): builds GGNN, GAT and
StackedLSTMModel the way the codebase does (``Model.partial(info=,
config=)`` as ``models_lib.get_model``; ``BaseAdapter.create_optimizer``:
a jitted ``create_model`` with the model class static, ``model_cls.init``
inside ``flax.nn.attention.Cache().mutate()``, ``nn.Model``,
``optimizer_utils.create_optimizer`` = ``optim.Adam(...).create``; and
the plain way, ``model_cls.init`` and ``nn.Model``, for the rest), runs
them, takes a gradient, does one step of the adapter's pmapped
``train_step`` (``nn.stateful`` + ``nn.stochastic`` in the loss, global-norm
clipping, ``apply_gradient(grad, learning_rate=lr)``) and its
``eval_step``.  The models use ``.shared`` modules called under
``jax.vmap`` / ``jax.lax.scan``, lists of ``nn.LSTMCell.partial`` handed
to another module, ``nn.recurrent.GRUCell.shared``.

The parameters are overwritten after init with numbers drawn from numpy, so
that both sides compute from the same weights.

Usage: python drive_ipagnn.py OUT.npz [MODEL ...]   (ipagnn's parent on
sys.path; MODEL among GGNN GAT StackedLSTMModel, all by default)
"""
import sys
import types

import numpy as np

from flax import jax_utils
from flax import nn
import jax
import jax.numpy as jnp


def _jax_drift():
  """ipagnn calls jax.tree_multimap and jax.ops.index_update / index_max,
  gone from jax >= 0.3 (the oracle's jax 0.4.13 too). Not Flax drift: the
  driver restores them, on both sides alike."""
  if not hasattr(jax, 'tree_multimap'):
    jax.tree_multimap = jax.tree_util.tree_map
  if not hasattr(jax.ops, 'index_update'):
    jax.ops.index_update = lambda x, idx, y: x.at[idx].set(y)
  if not hasattr(jax.ops, 'index_max'):
    jax.ops.index_max = lambda x, idx, y: x.at[idx].max(y)


_jax_drift()
# common_adapters imports summary_utils (text summaries, matplotlib): unused.
sys.modules.setdefault('ipagnn.lib.summary_utils',
                       types.ModuleType('ipagnn.lib.summary_utils'))

from ipagnn.adapters import common_adapters  # pylint: disable=g-import-not-at-top
from ipagnn.lib import optimizer_utils  # pylint: disable=g-import-not-at-top
from ipagnn.models import gat  # pylint: disable=g-import-not-at-top
from ipagnn.models import ggnn  # pylint: disable=g-import-not-at-top
from ipagnn.models import rnn_models  # pylint: disable=g-import-not-at-top

NS = types.SimpleNamespace
VOCAB, OUT_VOCAB, HIDDEN = 11, 7, 8
CONFIG = NS(
    model=NS(hidden_size=HIDDEN, rnn_cell=NS(layers=2)),
    initialization=NS(maxval=0.3),
    opt=NS(learning_rate=1e-2, learning_rate_factors='constant',
           clip_by='global_norm', clip_value=1.0),
    dataset=NS(representation='code'))


class _Builder:

  def key(self, name):
    return name


class Info:
  """The dataset info the models read."""

  def __init__(self):
    self._builder = _Builder()
    self.features = {'statements': NS(vocab_size=VOCAB)}
    self.output_vocab_size = OUT_VOCAB
    self.max_diameter = 2
    self.supervised_keys = ('inputs', 'target_output')


class StaticExample(dict):
  """create_model's jit takes the example as a static argument: by identity."""
  __hash__ = object.__hash__

  def __eq__(self, other):
    return self is other


def graph_example(seed, batch=2, nodes=5, length=3, edges=6):
  r = np.random.RandomState(seed)
  return {
      'start_index': np.zeros((batch,), np.int32),
      'exit_index': r.randint(0, nodes, (batch,)).astype(np.int32),
      'steps': r.randint(1, 4, (batch, 1)).astype(np.int32),
      'edge_types': r.randint(0, 6, (batch, edges)).astype(np.int32),
      'source_indices': r.randint(0, nodes, (batch, edges)).astype(np.int32),
      'dest_indices': r.randint(0, nodes, (batch, edges)).astype(np.int32),
      'data': r.randint(0, VOCAB, (batch, nodes, length)).astype(np.int32),
      'target_output': r.randint(0, OUT_VOCAB, (batch, 1)).astype(np.int32),
  }


def sequence_example(seed, batch=2, length=6):
  r = np.random.RandomState(seed)
  return {
      'code_statements': r.randint(0, VOCAB, (batch, length)).astype(np.int32),
      'code_length': r.randint(2, length + 1, (batch,)).astype(np.int32),
      'target_output': r.randint(0, OUT_VOCAB, (batch, 1)).astype(np.int32),
  }


def flat(tree, prefix=''):
  out = {}
  tree = tree.unfreeze() if hasattr(tree, 'unfreeze') else tree
  for k in sorted(tree.keys()):
    v = tree[k]
    name = f'{prefix}/{k}' if prefix else str(k)
    if hasattr(v, 'keys'):
      out.update(flat(v, name))
    else:
      out[name] = np.asarray(v)
  return out


def unflat(leaves):
  tree = {}
  for name, v in leaves.items():
    node = tree
    parts = name.split('/')
    for p in parts[:-1]:
      node = node.setdefault(p, {})
    node[parts[-1]] = jnp.asarray(v)
  return tree


def fixed_params(params):
  """Numbers drawn from numpy, leaf by leaf in path order."""
  rng = np.random.RandomState(0)
  leaves = flat(params)
  return unflat({
      k: (0.5 * rng.standard_normal(v.shape) /
          np.sqrt(v.shape[0] if v.ndim == 2 else 1)).astype(v.dtype)
      for k, v in leaves.items()})


MODELS = {
    'GGNN': (ggnn.GGNN, graph_example),
    'GAT': (gat.GAT, graph_example),
    'StackedLSTMModel': (rnn_models.StackedLSTMModel, sequence_example),
}


def drive(name, results, failed):
  cls, make_example = MODELS[name]
  info = Info()
  model_cls = cls.partial(info=info, config=CONFIG)  # models_lib.get_model
  adapter = common_adapters.BaseAdapter(info, CONFIG)

  # the adapter's create_optimizer (attention Cache block, jitted init)
  example = StaticExample(make_example(1))
  run_configuration = NS(dataset_info=NS(dataset=[example]), model=model_cls)
  try:
    optimizer = adapter.create_optimizer(run_configuration,
                                         rng=jax.random.PRNGKey(0))
    for k, v in flat(optimizer.target.params).items():
      results[f'{name}:adapter_init:{k}'] = v
  except Exception as e:  # pylint: disable=broad-except
    failed[f'{name}:create_optimizer'] = f'{type(e).__name__}: {e}'[:300]
    print(name, 'create_optimizer FAILED', failed[f'{name}:create_optimizer'])

  # the same model made the plain way (model_cls.init, nn.Model)
  _, params = model_cls.init(jax.random.PRNGKey(0), make_example(1))
  model = nn.Model(model_cls, params)
  for k, v in flat(model.params).items():
    results[f'{name}:init:{k}'] = v

  model = model.replace(params=fixed_params(model.params))
  inputs = make_example(2)
  logits = model(inputs)
  results[f'{name}:logits'] = np.asarray(logits)

  def loss(model):
    logits = model(inputs, train=True)
    return common_adapters.compute_weighted_cross_entropy(
        logits, jnp.asarray(inputs['target_output']))[0]

  grad = jax.grad(loss)(model)
  for k, v in flat(grad.params).items():
    results[f'{name}:grad:{k}'] = v

  # one pmapped training step and an evaluation step, as workflows.run_train
  optimizer = optimizer_utils.create_optimizer(model, CONFIG.opt.learning_rate)
  optimizer = jax_utils.replicate(optimizer, jax.local_devices()[:1])
  train_step = adapter.make_train_step()
  batch = jax.tree_util.tree_map(lambda x: np.asarray(x)[None],
                                 make_example(3))
  dropout_rngs = jax.random.split(jax.random.PRNGKey(4), 1)
  optimizer, metrics, dropout_rngs, logits, state = train_step(
      optimizer, batch, dropout_rngs)
  results[f'{name}:train:logits'] = np.asarray(logits)
  for k, v in metrics.items():
    results[f'{name}:train:metric:{k}'] = np.asarray(v)
  results[f'{name}:train:state_len'] = np.asarray(len(state))
  trained = jax.tree_util.tree_map(lambda x: x[0], optimizer.target.params)
  for k, v in flat(trained).items():
    results[f'{name}:trained:{k}'] = v
  eval_step = jax.pmap(adapter.make_eval_step(), axis_name='batch')
  metrics, logits, state = eval_step(optimizer.target, batch)
  results[f'{name}:eval:logits'] = np.asarray(logits)
  for k, v in metrics.items():
    results[f'{name}:eval:metric:{k}'] = np.asarray(v)


def main(out, names):
  results = {}
  failed = {}
  for name in names:
    try:
      drive(name, results, failed)
      print(name, 'ok')
    except Exception as e:  # pylint: disable=broad-except
      import traceback  # pylint: disable=g-import-not-at-top
      traceback.print_exc()
      failed[name] = f'{type(e).__name__}: {e}'[:300]
      print(name, 'FAILED', failed[name])
  np.savez(out, **results)
  print('saved', len(results), 'arrays to', out, '- failed:', sorted(failed))
  print('flaxlegacy imported:', 'flaxlegacy' in sys.modules)


if __name__ == '__main__':
  main(sys.argv[1], sys.argv[2:] or list(MODELS))
