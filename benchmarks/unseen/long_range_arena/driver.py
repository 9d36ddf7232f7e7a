"""Drives long-range-arena's model families at tiny sizes, legacy-style.

Builds each encoder the way the codebase's trainers do (``train_utils.get_model``
with a jitted ``create_model``: ``module.partial(**kwargs)`` ->
``init_by_shape`` under ``nn.stochastic`` -> ``nn.Model``), an ``optim.Adam``
with weight decay, one ``apply_gradient`` step with dropout keys, and an
evaluation pass; the dual encoders (matching task) the way
``matching/train.py`` does; the stateful TLB encoder the way
``image/train.py`` does (``nn.stateful``).

Usage: LRA_SRC=<dir holding lra_benchmarks> python driver.py OUT.npz [family...]
Random int tokens, fixed PRNG keys; nothing is downloaded.
"""
import functools
import os
import sys
import traceback

sys.path.insert(0, os.environ.get('LRA_SRC', '/work/unseen/lra'))
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                'shims'))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import random  # noqa: E402
import numpy as np  # noqa: E402
from flax import optim  # noqa: E402
from flax.deprecated import nn  # noqa: E402

from lra_benchmarks.models.bigbird import bigbird  # noqa: E402
from lra_benchmarks.models.linear_transformer import linear_transformer  # noqa: E402
from lra_benchmarks.models.linformer import linformer  # noqa: E402
from lra_benchmarks.models.local import local  # noqa: E402
from lra_benchmarks.models.longformer import longformer  # noqa: E402
from lra_benchmarks.models.performer import performer  # noqa: E402
from lra_benchmarks.models.reformer import reformer  # noqa: E402
from lra_benchmarks.models.sinkhorn_transformer import sinkhorn_transformer  # noqa: E402
from lra_benchmarks.models.sparse_transformer import sparse_attention  # noqa: E402
from lra_benchmarks.models.sparse_transformer import sparse_transformer  # noqa: E402
from lra_benchmarks.models.synthesizer import synthesizer  # noqa: E402
from lra_benchmarks.models.transformer import transformer  # noqa: E402
from lra_benchmarks.models.transformer_tlb import transformer_tlb  # noqa: E402
from lra_benchmarks.utils import train_utils  # noqa: E402

BATCH = 2
LENGTH = 16
VOCAB = 11
NUM_CLASSES = 3

# LRA_DROPOUT=0: no dropout (the upgraded side draws dropout masks with
# linen's keys, not legacy's: compare its training step without dropout)
_DROPOUT = {} if os.environ.get('LRA_DROPOUT', '') == '' else {
    'dropout_rate': float(os.environ['LRA_DROPOUT']),
    'attention_dropout_rate': float(os.environ['LRA_DROPOUT'])}

BASE_KWARGS = {
    'vocab_size': VOCAB,
    'emb_dim': 16,
    'num_heads': 2,
    'num_layers': 1,
    'qkv_dim': 16,
    'mlp_dim': 32,
    'max_len': LENGTH,
    'classifier': True,
    'num_classes': NUM_CLASSES,
    'classifier_pool': 'CLS',
    **_DROPOUT,
}

# Per-family extra keywords (the codebase's configs put these in config.model).
EXTRA = {
    'transformer': {},
    'synthesizer': {},
    'reformer': {'classifier_pool': 'MEAN'},
    'performer': {},
    'linformer': {},
    'local': {'classifier_pool': 'MEAN', 'block_size': 8},
    'bigbird': {'classifier_pool': 'MEAN', 'block_size': 2},
    'sinkhorn': {'classifier_pool': 'MEAN', 'block_size': 8},
    'linear_transformer': {},
    'sparse_transformer': {},
    'longformer': {'sliding_window_size': 4},
    'transformer_tlb': {'num_state_tokens': 4, 'block_size': 8},
}

# jnp.pad with a pad_width built by jnp.array(...) inside the model: under jit
# this is a tracer on jax >= 0.4 (oracle and today alike), so these run with
# jax.disable_jit() (the trainers jit/pmap them).
EAGER = ('reformer', 'local', 'bigbird', 'sparse_transformer')


DUAL = {
    'transformer': transformer.TransformerDualEncoder,
    'linformer': linformer.LinformerDualEncoder,
    'linear_transformer': linear_transformer.LinearTransformerDualEncoder,
    'performer': performer.PerformerDualEncoder,
    'synthesizer': synthesizer.SynthesizerDualEncoder,
    'longformer': longformer.LongformerDualEncoder,
}


def create_model(flax_module, model_kwargs, key, input_shape):
  """As text_classification/train.py."""

  @functools.partial(jax.jit, backend='cpu')
  def _create_model(key):
    module = flax_module.partial(**model_kwargs)
    with nn.stochastic(key):
      _, initial_params = module.init_by_shape(key,
                                               [(input_shape, jnp.float32)])
      model = nn.Model(module, initial_params)
    return model

  return _create_model(key)


def create_stateful_model(flax_module, model_kwargs, key, input_shape):
  """As image/train.py."""

  @functools.partial(jax.jit, backend='cpu')
  def _create_model(key):
    module = flax_module.partial(**model_kwargs)
    with nn.stateful() as init_state:
      with nn.stochastic(key):
        _, initial_params = module.init_by_shape(key,
                                                 [(input_shape, jnp.float32)])
        model = nn.Model(module, initial_params)
    return model, init_state

  return _create_model(key)


def create_dual_model(flax_module, model_kwargs, key, input1_shape,
                      input2_shape):
  """As matching/train.py."""

  @functools.partial(jax.jit, backend='cpu')
  def _create_model(key):
    module = flax_module.partial(**model_kwargs)
    with nn.stochastic(key):
      _, initial_params = module.init_by_shape(key,
                                               [(input1_shape, jnp.float32),
                                                (input2_shape, jnp.float32)])
      model = nn.Model(module, initial_params)
    return model

  return _create_model(key)


def create_optimizer(model, learning_rate, weight_decay):
  optimizer_def = optim.Adam(
      learning_rate, beta1=0.9, beta2=0.98, eps=1e-9, weight_decay=weight_decay)
  optimizer = optimizer_def.create(model)
  return optimizer


learning_rate_fn = train_utils.create_learning_rate_scheduler(
    factors='constant * linear_warmup * rsqrt_decay',
    base_learning_rate=0.05, warmup_steps=4)


@jax.jit
def train_step(optimizer, inputs, targets, dropout_rng):
  """As text_classification/train.py, without pmap."""
  dropout_rng, new_dropout_rng = random.split(dropout_rng)

  def loss_fn(model):
    with nn.stochastic(dropout_rng):
      logits = model(inputs, train=True)
    loss, weight_sum = train_utils.compute_weighted_cross_entropy(
        logits, targets, num_classes=NUM_CLASSES, weights=None)
    return loss / weight_sum, logits

  step = optimizer.state.step
  lr = learning_rate_fn(step + 1)
  grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
  (loss, logits), grad = grad_fn(optimizer.target)
  new_optimizer = optimizer.apply_gradient(grad, learning_rate=lr)
  return new_optimizer, loss, logits, new_dropout_rng


@jax.jit
def eval_step(model, inputs):
  return model(inputs, train=False)


@jax.jit
def stateful_train_step(optimizer, state, inputs, targets, dropout_rng):
  """As image/train.py, without pmap."""
  dropout_rng, new_dropout_rng = random.split(dropout_rng)

  def loss_fn(model):
    with nn.stateful(state) as new_state:
      with nn.stochastic(dropout_rng):
        logits = model(inputs, train=True)
    loss, weight_sum = train_utils.compute_weighted_cross_entropy(
        logits, targets, num_classes=NUM_CLASSES, weights=None)
    return loss / weight_sum, (new_state, logits)

  step = optimizer.state.step
  lr = learning_rate_fn(step + 1)
  grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
  (loss, (new_state, logits)), grad = grad_fn(optimizer.target)
  new_optimizer = optimizer.apply_gradient(grad, learning_rate=lr)
  return new_optimizer, new_state, loss, logits, new_dropout_rng


@jax.jit
def stateful_eval_step(model, state, inputs):
  with nn.stateful(state, mutable=False):
    return model(inputs, train=False)


@jax.jit
def dual_train_step(optimizer, inputs1, inputs2, targets, dropout_rng):
  """As matching/train.py, without pmap."""
  dropout_rng, new_dropout_rng = random.split(dropout_rng)

  def loss_fn(model):
    with nn.stochastic(dropout_rng):
      logits = model(inputs1, inputs2, train=True)
    loss, weight_sum = train_utils.compute_weighted_cross_entropy(
        logits, targets, num_classes=NUM_CLASSES, weights=None)
    return loss / weight_sum, logits

  step = optimizer.state.step
  lr = learning_rate_fn(step + 1)
  grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
  (loss, logits), grad = grad_fn(optimizer.target)
  new_optimizer = optimizer.apply_gradient(grad, learning_rate=lr)
  return new_optimizer, loss, logits, new_dropout_rng


@jax.jit
def dual_eval_step(model, inputs1, inputs2):
  return model(inputs1, inputs2, train=False)


def flat(tree, prefix):
  out = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    keys = []
    for k in path:
      keys.append(str(getattr(k, 'key', getattr(k, 'name', getattr(k, 'idx', k)))))
    out[prefix + '/'.join(keys)] = np.asarray(leaf)
  return out


def init_from(model, tag):
  """With LRA_INIT_FROM=<driver output>.npz, the model's initial parameters
  are that run's (by tree path): linen derives parameter keys apart from
  legacy Flax, so an upgraded model is compared from the legacy init."""
  path = os.environ.get('LRA_INIT_FROM')
  if not path:
    return model
  saved = np.load(path)
  leaves, treedef = jax.tree_util.tree_flatten(model.params)
  paths = list(flat(model.params, f'{tag}/init/'))
  new = [jnp.asarray(saved[k], dtype=l.dtype) for k, l in zip(paths, leaves)]
  return model.replace(params=jax.tree_util.tree_unflatten(treedef, new))


def data(seed, length=LENGTH):
  rng = np.random.RandomState(seed)
  inputs = rng.randint(1, VOCAB, size=(BATCH, length)).astype(np.int32)
  inputs[:, -3:] = 0  # some padding, as the input pipelines produce
  targets = rng.randint(0, NUM_CLASSES, size=(BATCH,)).astype(np.int32)
  return jnp.asarray(inputs), jnp.asarray(targets)


def run_classifier(name, results):
  kwargs = dict(BASE_KWARGS)
  kwargs.update(EXTRA[name])
  inputs, targets = data(0)
  key = random.PRNGKey(0)
  if name == 'transformer_tlb':
    kwargs['classifier_pool'] = 'MEAN'
    model, state = train_utils.get_model(name, create_stateful_model, kwargs,
                                         key, inputs.shape)
  else:
    model = train_utils.get_model(name, create_model, kwargs, key,
                                  inputs.shape)
    state = None
  model = init_from(model, name)
  results.update(flat(model.params, f'{name}/init/'))
  optimizer = create_optimizer(model, 0.05, weight_decay=0.1)
  dropout_rng = random.PRNGKey(1)
  for step in range(2):
    if state is None:
      optimizer, loss, logits, dropout_rng = train_step(
          optimizer, inputs, targets, dropout_rng)
    else:
      optimizer, state, loss, logits, dropout_rng = stateful_train_step(
          optimizer, state, inputs, targets, dropout_rng)
    results[f'{name}/loss{step}'] = np.asarray(loss)
    results[f'{name}/train_logits{step}'] = np.asarray(logits)
  results.update(flat(optimizer.target.params, f'{name}/step2/'))
  if state is None:
    results[f'{name}/eval_logits'] = np.asarray(
        eval_step(optimizer.target, inputs))
  else:
    results[f'{name}/eval_logits'] = np.asarray(
        stateful_eval_step(optimizer.target, state, inputs))


def run_dual(name, results):
  cls = DUAL[name]
  kwargs = dict(BASE_KWARGS)
  del kwargs['classifier']
  if name == 'longformer':
    kwargs['classifier_pool'] = 'MEAN'
  kwargs['interaction'] = 'NLI'
  inputs1, targets = data(2)
  inputs2, _ = data(3)
  key = random.PRNGKey(4)
  model = create_dual_model(cls, kwargs, key, inputs1.shape, inputs2.shape)
  tag = f'dual_{name}'
  model = init_from(model, tag)
  results.update(flat(model.params, f'{tag}/init/'))
  optimizer = create_optimizer(model, 0.05, weight_decay=0.1)
  dropout_rng = random.PRNGKey(5)
  for step in range(2):
    optimizer, loss, logits, dropout_rng = dual_train_step(
        optimizer, inputs1, inputs2, targets, dropout_rng)
    results[f'{tag}/loss{step}'] = np.asarray(loss)
    results[f'{tag}/train_logits{step}'] = np.asarray(logits)
  results.update(flat(optimizer.target.params, f'{tag}/step2/'))
  results[f'{tag}/eval_logits'] = np.asarray(
      dual_eval_step(optimizer.target, inputs1, inputs2))


def main(argv):
  out = argv[1]
  wanted = argv[2:] or (list(EXTRA) + ['dual_' + n for n in DUAL])
  results = {}
  status = {}
  for name in wanted:
    try:
      if name.startswith('dual_'):
        run_dual(name[len('dual_'):], results)
      elif name in EAGER:
        with jax.disable_jit():
          run_classifier(name, results)
      else:
        run_classifier(name, results)
      status[name] = 'ok'
    except Exception as e:  # pylint: disable=broad-except
      traceback.print_exc()
      status[name] = f'FAIL {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ""}'
  for name, s in status.items():
    print(f'{name:24s} {s}')
  results['__status__'] = np.array(
      [f'{n}={s}' for n, s in status.items()])
  np.savez(out, **results)
  print('flaxlegacy imported:', 'flaxlegacy' in sys.modules)


if __name__ == '__main__':
  main(sys.argv)
