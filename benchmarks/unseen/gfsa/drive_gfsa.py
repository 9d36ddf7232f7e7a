"""Drives google-research's gfsa (graph layers and edge-supervision models
on flax.nn, flax.optim.Adam) on CPU.

Written for flaxlegacy's checks (not part of gfsa). It does what gfsa's
edge-supervision trainer (training/train_edge_supervision_lib.py and
training/train_util.py) does, on tiny graphs:

* gin bindings (``gin.parse_config``) give the layers their sizes, as
  gfsa's .gin configs do (``@gin.configurable`` ``apply`` methods and
  ``@flax.nn.module @gin.configurable`` functions);
* ``edge_supervision_models.BaselineModel.partial(graph_metadata=...,
  edge_types_to_indices=...)``, ``model_def.init(rng, example)`` inside
  ``flax.nn.stochastic`` inside ``jax.jit``, ``flax.nn.Model``;
* the forward pass of ``extract_outputs_and_targets``:
  ``side_outputs.collect_side_outputs()`` (an ``nn.Collection`` mutated
  through a ``flax.nn.utils.CallStack``) around ``flax.nn.stochastic``
  around ``model(example)``;
* ``flax.optim.Adam().create(model)``, ``train_util.device_broadcast``
  (``jax.pmap(lambda _: x)``) and two pmapped ``_parallel_train_step``s:
  ``jax.vmap(loss_fn, (None, 0, None))`` over a batch of examples inside
  ``value_and_grad`` of the model, ``pmean``, global-norm clipping,
  ``apply_gradient(grads, learning_rate=...)``.

Models: GGNN (a shared step under ``lax.scan``), GGNN nodewise (``jax.vmap``
of a function calling modules), RAT transformer (learned edge embeddings,
``jax.checkpoint`` inside ``apply``, ``flax_tag``), GREAT-style transformer
with shared weights masked to neighbours, NRI encoder + NRI readout, and a
readout of ours built like ``end_to_end_stack.embedding_variant_automaton``
(``BilinearPairwiseReadout`` + ``side_outputs.encourage_discrete_logits``),
with and without logistic perturbation (``flax.nn.make_rng``).

The parameters are overwritten after init with numbers drawn from numpy, so
that every side computes from the same weights.

Usage: python drive_gfsa.py OUT.npz   (gfsa's parent, gin and this
directory on sys.path)
"""
import sys

import numpy as np

import jax_drift  # pylint: disable=unused-import  (before gfsa)

import flax
import gin
import jax
import jax.numpy as jnp
import optax

from gfsa import automaton_builder
from gfsa import jax_util
from gfsa import sparse_operator
from gfsa.datasets import graph_bundle
from gfsa.model import edge_supervision_models
from gfsa.model import graph_layers
from gfsa.model import model_util
from gfsa.model import side_outputs

# a layout hint whose value is the identity; its primitive's rules are
# written for 2021's JAX (jax_drift.py)
jax_util.force_physical_layout = lambda operand: operand

EDGE_TYPES = ['CHILD', 'NEXT', 'LAST_READ']
EDGE_TYPES_TO_INDICES = {name: i for i, name in enumerate(EDGE_TYPES)}
TARGET_EDGE = 'LAST_READ'
NUM_NODES = 6

BASE_GIN = """
BaselineModel.forward_edge_types = [["CHILD", "NEXT"], ["LAST_READ"]]
BaselineModel.reverse_edge_types = [["CHILD"]]
NodeTypeNodeEmbedding.embedding_dim = 8
PositionalAndTypeNodeEmbedding.embedding_dim = 8
PositionalAndTypeNodeEmbedding.period_scale = 16.0
LearnableEdgeEmbeddings.embedding_dim = 4
LinearMessagePassing.message_dim = 8
ggnn_steps.iterations = 2
NodeSelfAttention.heads = 2
transformer_steps.layers = 2
NRIEdgeLayer.mlp_vtoe_dims = [8, 6]
nri_steps.layers = 2
nri_steps.mlp_etov_dims = [8]
"""

CONFIGS = {
    'ggnn': """
BaselineModel.use_position_embeddings = True
BaselineModel.learn_edge_embeddings = False
BaselineModel.model_type = "ggnn"
""",
    'ggnn_nodewise': """
BaselineModel.use_position_embeddings = False
BaselineModel.learn_edge_embeddings = True
BaselineModel.model_type = "ggnn"
BaselineModel.nodewise = True
""",
    'rat': """
BaselineModel.use_position_embeddings = False
BaselineModel.learn_edge_embeddings = True
BaselineModel.model_type = "transformer"
""",
    'great_shared': """
BaselineModel.use_position_embeddings = True
BaselineModel.learn_edge_embeddings = False
BaselineModel.model_type = "transformer"
NodeSelfAttention.like_great = True
transformer_steps.mask_to_neighbors = True
transformer_steps.share_weights = True
""",
    'nri': """
BaselineModel.use_position_embeddings = True
BaselineModel.learn_edge_embeddings = True
BaselineModel.model_type = "nri_encoder"
nri_steps.with_residual_layer_norm = True
NRIEdgeLayer.allow_non_adjacent = True
""",
}


# --- tiny graphs -----------------------------------------------------------


def make_example(seed, num_real_nodes):
  """A padded GraphBundle: edges as a SparseCoordOperator from edge types to
  (source, destination) pairs, as gfsa's data loading encodes them."""
  rng = np.random.RandomState(seed)
  edges = [(0, 0, 1), (0, 0, 2), (0, 2, 3), (1, 1, 2), (1, 2, 3), (1, 3, 4),
           (2, 4, 3), (2, 1, 4), (2, 3, 2)]
  edges = [e for e in edges if e[1] < num_real_nodes and e[2] < num_real_nodes]
  values = [1] * len(edges)
  while len(edges) < 10:  # padding entries carry value 0
    edges.append((0, 0, 0))
    values.append(0)
  edges = np.array(edges, np.int32)
  node_types = rng.randint(0, 7, size=(NUM_NODES,)).astype(np.int32)
  node_types[num_real_nodes:] = 0
  return graph_bundle.GraphBundle(
      automaton_graph=None,
      graph_metadata=automaton_builder.EncodedGraphMetadata(
          num_nodes=jnp.asarray(num_real_nodes, jnp.int32),
          num_input_tagged_nodes=jnp.asarray(0, jnp.int32)),
      node_types=jnp.asarray(node_types),
      edges=sparse_operator.SparseCoordOperator(
          input_indices=jnp.asarray(edges[:, :1]),
          output_indices=jnp.asarray(edges[:, 1:]),
          values=jnp.asarray(values, jnp.int32)))


STATIC_METADATA = automaton_builder.EncodedGraphMetadata(
    num_nodes=NUM_NODES, num_input_tagged_nodes=0)


# --- trees ----------------------------------------------------------------


def flat(tree, prefix=''):
  out = {}
  if hasattr(tree, 'as_dict'):
    tree = tree.as_dict()
  tree = flax.core.unfreeze(tree) if hasattr(tree, 'unfreeze') else tree
  for k in sorted(tree.keys()):
    v = tree[k]
    name = f'{prefix}/{k}' if prefix else str(k)
    if hasattr(v, 'keys'):
      out.update(flat(v, name))
    else:
      out[name] = np.asarray(v)
  return out


def fixed_params(params):
  """Numbers drawn from numpy, leaf by leaf in path order (the tree's
  structure kept: modules without parameters hold empty dicts)."""
  rng = np.random.RandomState(0)
  drawn = {}
  for k, v in flat(params).items():
    fan_in = int(np.prod(v.shape[:-1])) if v.ndim >= 2 else 1
    drawn[k] = (0.5 * rng.standard_normal(v.shape) / np.sqrt(fan_in)).astype(
        v.dtype)
    if k.endswith('scale'):
      drawn[k] = (1. + 0.1 * rng.standard_normal(v.shape)).astype(v.dtype)

  def rebuild(tree, prefix):
    tree = flax.core.unfreeze(tree) if hasattr(tree, 'unfreeze') else tree
    out = {}
    for k in tree.keys():
      name = f'{prefix}/{k}' if prefix else str(k)
      v = tree[k]
      out[k] = rebuild(v, name) if hasattr(v, 'keys') else jnp.asarray(
          drawn[name])
    return out

  return rebuild(params, '')


# --- the trainer's functions ------------------------------------------------


def extract_outputs_and_targets(model, padded_example_and_rng,
                                target_edge_index, num_edge_types):
  """As train_edge_supervision_lib.extract_outputs_and_targets."""
  padded_example, rng = padded_example_and_rng
  with side_outputs.collect_side_outputs() as captured:
    with flax.nn.stochastic(rng):
      output_logits = model(padded_example)
  targets = padded_example.edges.apply_add(
      in_array=(jnp.arange(num_edge_types) == target_edge_index).astype(
          'int32'),
      out_array=jnp.zeros(output_logits.shape, dtype='int32')).astype('bool')
  max_num_nodes = output_logits.shape[0]
  num_nodes = padded_example.graph_metadata.num_nodes
  valid_nodes = (jnp.arange(max_num_nodes) < num_nodes).astype('float32')
  valid_mask = jnp.einsum('i,j->ij', valid_nodes, valid_nodes)
  return output_logits, targets, valid_mask, num_nodes, captured


def loss_fn(output_logits, targets, valid_mask, num_nodes, captured):
  """The trainer's loss (negative_example_weight 1, no focal term)."""
  del captured
  num_targets = jnp.count_nonzero(targets)
  masked_nll = model_util.binary_logit_cross_entropy(output_logits,
                                                     targets) * valid_mask
  positive_nll = jnp.sum(jnp.where(targets, masked_nll, 0.))
  negative_nll = jnp.sum(jnp.where(targets, 0., masked_nll))
  return positive_nll + negative_nll, {
      'avg_per_target': positive_nll / num_targets,
      'avg_per_non_target': negative_nll / (num_nodes**2 - num_targets),
  }


def compute_loss_for_model(model, padded_example_and_rng, static_metadata):
  assert static_metadata is None
  return loss_fn(*extract_outputs_and_targets(
      model, padded_example_and_rng,
      target_edge_index=EDGE_TYPES_TO_INDICES[TARGET_EDGE],
      num_edge_types=len(EDGE_TYPES)))


def device_broadcast(x, num_devices):
  return jax.pmap(lambda _: x)(jnp.arange(num_devices))


def parallel_train_step(optimizer, batched_examples, max_global_norm,
                        learning_rate):
  """As train_util._parallel_train_step, pmapped over 'devices'."""

  def batched_loss_fn(model):
    loss, metrics = jax.vmap(compute_loss_for_model,
                             (None, 0, None))(model, batched_examples, None)
    return jnp.mean(loss), metrics

  (loss, metrics), grads = jax.value_and_grad(
      batched_loss_fn, has_aux=True)(optimizer.target)
  metrics['loss'] = loss
  agg_grads = jax.lax.pmean(grads, 'devices')
  agg_metrics = {k: jnp.nanmean(jax.lax.all_gather(v, 'devices'))
                 for k, v in metrics.items()}
  global_norm = optax.global_norm(agg_grads)
  agg_metrics['gradient_global_norm'] = global_norm
  should_clip = global_norm > max_global_norm
  agg_grads = jax.tree_util.tree_map(
      lambda g: jnp.where(should_clip, g * max_global_norm / global_norm, g),
      agg_grads)
  updated_optimizer = optimizer.apply_gradient(agg_grads,
                                               learning_rate=learning_rate)
  return updated_optimizer, agg_metrics, agg_grads


pmapped_train_step = jax.pmap(
    parallel_train_step, axis_name='devices', in_axes=(0, 0, None, None))


# --- a readout built like end_to_end_stack.embedding_variant_automaton -------


@flax.nn.module
def variant_readout(example, num_variants):
  node_embeddings = graph_layers.NodeTypeNodeEmbedding(
      node_types=example.node_types, num_node_types=7)
  variant_logits = graph_layers.BilinearPairwiseReadout(
      node_embeddings, num_variants, name='variant_logits')
  variant_logits = side_outputs.encourage_discrete_logits(
      variant_logits, distribution_type='categorical', name='variant_logits')
  gates = model_util.ScaleAndShift(variant_logits[..., 0])
  gates = side_outputs.encourage_discrete_logits(
      gates, distribution_type='binary', name='gates')
  return jax.nn.softmax(variant_logits), jax.nn.sigmoid(gates)


def run_side_outputs(results, perturb):
  gin.clear_config()
  text = BASE_GIN
  if perturb:
    text += 'encourage_discrete_logits.perturb_scale = 0.5\n'
  gin.parse_config(text)
  name = 'side_perturb' if perturb else 'side'
  example = make_example(1, 5)
  model_def = variant_readout.partial(num_variants=3)
  with flax.nn.stochastic(jax.random.PRNGKey(0)):
    _, params = model_def.init(jax.random.PRNGKey(5), example)
  for k, v in flat(params).items():
    results[f'{name}:init:{k}'] = v
  model = flax.nn.Model(model_def, fixed_params(params))
  with side_outputs.collect_side_outputs() as captured:
    with flax.nn.stochastic(jax.random.PRNGKey(7)):
      weights, gates = model(example)
  tag = ':rng' if perturb else ''
  results[f'{name}{tag}:weights'] = np.asarray(weights)
  results[f'{name}{tag}:gates'] = np.asarray(gates)
  for k, v in sorted(captured.items()):
    results[f'{name}{tag}:captured:{k}'] = np.asarray(v)
  results[f'{name}:captured_keys'] = np.asarray(sorted(captured.keys()))


def run(name, config, results, save):
  gin.clear_config()
  gin.parse_config(BASE_GIN + config)

  model_def = edge_supervision_models.BaselineModel.partial(
      graph_metadata=STATIC_METADATA,
      edge_types_to_indices=EDGE_TYPES_TO_INDICES)

  @jax.jit
  def _init(rng):
    with flax.nn.stochastic(jax.random.PRNGKey(0)):
      ex = make_example(0, NUM_NODES)
      ex = jax.tree_util.tree_map(jnp.zeros_like, ex)
      _, initial_params = model_def.init(rng, ex)
    return initial_params

  initial_params = _init(jax.random.PRNGKey(11))
  for k, v in flat(initial_params).items():
    results[f'{name}:init:{k}'] = v

  model = flax.nn.Model(model_def, fixed_params(initial_params))
  example = make_example(1, 5)
  logits, targets, valid_mask, num_nodes, captured = (
      extract_outputs_and_targets(
          model, (example, jax.random.PRNGKey(2)),
          EDGE_TYPES_TO_INDICES[TARGET_EDGE], len(EDGE_TYPES)))
  results[f'{name}:logits'] = np.asarray(logits)
  results[f'{name}:targets'] = np.asarray(targets)
  results[f'{name}:valid_mask'] = np.asarray(valid_mask)
  results[f'{name}:captured'] = np.asarray(len(captured))
  loss, metrics = loss_fn(logits, targets, valid_mask, num_nodes, captured)
  results[f'{name}:loss'] = np.asarray(loss)

  grads = jax.grad(lambda m: compute_loss_for_model(
      m, (example, jax.random.PRNGKey(2)), None)[0])(model)
  for k, v in flat(grads.params).items():
    results[f'{name}:grad:{k}'] = v
  save()

  optimizer = flax.optim.Adam().create(model)
  num_devices = jax.local_device_count()
  optimizer = device_broadcast(optimizer, num_devices)
  examples = [make_example(s, n) for s, n in ((3, 5), (4, 6))]
  batch = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *examples)
  rngs = jax.random.split(jax.random.PRNGKey(9), 2)
  batched = jax.tree_util.tree_map(
      lambda x: jnp.broadcast_to(x[None], (num_devices,) + x.shape),
      (batch, rngs))
  for step in range(2):
    optimizer, metrics, agg_grads = pmapped_train_step(
        optimizer, batched, 1.0, 0.01)
    for k, v in sorted(metrics.items()):
      results[f'{name}:train{step}:{k}'] = np.asarray(v[0])
  one = jax.tree_util.tree_map(lambda x: x[0], optimizer)
  results[f'{name}:train:step'] = np.asarray(one.state.step)
  for k, v in flat(one.target.params).items():
    results[f'{name}:trained:{k}'] = v
  save()


def main(out):
  results = {}

  def save():
    np.savez(out, **results)

  for name, config in CONFIGS.items():
    run(name, config, results, save)
    print('done', name, flush=True)
  run_side_outputs(results, perturb=False)
  run_side_outputs(results, perturb=True)
  save()
  print('saved', len(results), 'arrays to', out)
  print('flaxlegacy imported:', 'flaxlegacy' in sys.modules)


if __name__ == '__main__':
  main(sys.argv[1])
