"""Drives google-research's gift (flax.deprecated.nn ResNet / WideResnet,
flax.optim) on CPU.

Written for flaxlegacy's checks (not part of gift). For each model family it
does what gift's pipelines do:

* ``all_models.get_model_class(name).build_flax_module(hparams)`` (a
  ``BaseModel`` classmethod returning ``cls.partial(**hparams)``);
* ``pipeline_utils.create_flax_module`` (``init_by_shape`` inside
  ``nn.stateful()`` + ``nn.stochastic`` inside a ``jax.jit(backend='cpu')``,
  ``nn.Model``, ``log_param_shapes``);
* the forward passes of ``pipeline_utils``: ``forward_pass_with_reps`` under
  ``nn.stochastic`` (``Trainer.forward_pass``), ``dann_forward_pass`` (the
  gradient-flipping discriminator), the ``jax.vmap``-decorated
  ``vmapped_flax_module_eval`` / ``_train`` / ``_with_reps``;
* ``optimizers.get_optimizer(hparams).create(model)`` (nesterov, adam,
  momentum with weight decay) into ``pipeline_utils.TrainState``,
  ``jax_utils.replicate``, two pmapped steps written as ``Trainer.train_step``
  / ``compute_grads_and_update`` with ``End2end.training_loss_fn``
  (``nn.stateful`` + ``nn.stochastic``, ``value_and_grad(has_aux=True)`` of
  the model, ``pmean``, ``apply_gradient(grad, learning_rate=lr)``,
  ``train_state.replace``);
* ``sync_model_state_across_replicas`` and the pmapped
  ``pipeline_utils.eval_step`` (``nn.stateful(state, mutable=False)``).

The parameters are overwritten after init with numbers drawn from numpy, so
that every side computes from the same weights.

Usage: python drive_gift.py OUT.npz   (gift's parent and the stand-ins on
sys.path)
"""
import functools
import sys

import numpy as np

import flax
from flax import jax_utils
from flax.deprecated import nn
import jax
import jax.numpy as jnp
import ml_collections

from gift.models import all_models
from gift.pipelines import pipeline_utils
from gift.train_lib import optimizers

CONFIGS = {
    # batch norm, a gradient-flipping discriminator, nesterov momentum
    'resnet': dict(
        model_name='resnet', output_dim=3, num_filters=4, num_layers=1,
        dropout_rate=0.0, input_dropout_rate=0.0, head_bias_init=0.1,
        has_discriminator=True, batch_size=4, image=16, optimizer='nesterov',
        lr_hparams={'initial_learning_rate': 0.1},
        opt_hparams={'momentum': 0.9, 'weight_decay': 1e-3}),
    # group norm, adam with weight decay
    'wrn': dict(
        model_name='wide_resnet', num_outputs=3, blocks_per_group=1,
        channel_multiplier=1, dropout_rate=0.0, norm_layer='group_norm',
        batch_size=2, image=32, optimizer='adam',
        lr_hparams={'initial_learning_rate': 0.01},
        opt_hparams={'weight_decay': 1e-3}),
    # batch norm and dropout (its train-mode numbers draw dropout masks)
    'wrn_bn_drop': dict(
        model_name='wide_resnet', num_outputs=3, blocks_per_group=1,
        channel_multiplier=1, dropout_rate=0.3, norm_layer='batch_norm',
        batch_size=2, image=32, optimizer='momentum',
        lr_hparams={'initial_learning_rate': 0.05},
        opt_hparams={'momentum': 0.8}),
}


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


def flat_state(state):
  """A model state's leaves by module path: legacy's nn.Collection keys
  are '/block/bn1' paths; linen's are under 'batch_stats' (the upgraded
  layout: docs/migration.md)."""
  out = {}
  for k, v in flat(state).items():
    k = k[len('batch_stats/'):] if k.startswith('batch_stats/') else k
    out[k.lstrip('/')] = v
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
  out = {}
  for k, v in leaves.items():
    fan_in = int(np.prod(v.shape[:-1])) if v.ndim >= 2 else 1
    out[k] = (0.5 * rng.standard_normal(v.shape) / np.sqrt(fan_in)).astype(
        v.dtype)
    if k.endswith('scale'):
      out[k] = (1. + 0.1 * rng.standard_normal(v.shape)).astype(v.dtype)
  return unflat(out)


def loss_function(logits, batch, params):
  """Softmax cross entropy plus a small l2 term (gift's tasks' shape)."""
  labels = jax.nn.one_hot(batch['label'], logits.shape[-1])
  xent = -jnp.mean(jnp.sum(labels * jax.nn.log_softmax(logits), axis=-1))
  l2 = sum(jnp.sum(x**2) for x in jax.tree_util.tree_leaves(params))
  return xent + 1e-4 * l2


def metrics_fn(logits, batch):
  loss = loss_function(logits, batch, {})
  acc = jnp.mean(jnp.argmax(logits, -1) == batch['label'])
  return {'loss': (jax.lax.psum(loss, 'batch'), 1.),
          'accuracy': jax.lax.pmean(acc, 'batch')}


class MiniTrainer(object):
  """Trainer.train_step / compute_grads_and_update + End2end's loss."""

  def __init__(self, hparams):
    self.hparams = hparams

  def training_loss_fn(self, flax_module, train_state, batch, dropout_rng):
    with nn.stateful(train_state.model_state) as new_model_state:
      with nn.stochastic(dropout_rng):
        logits = flax_module(batch['inputs'], train=True)

    loss = loss_function(logits, batch, flax_module.params)
    return loss, (new_model_state, logits)

  def get_learning_rate(self, step):
    return self.hparams.lr_hparams['initial_learning_rate'] * (
        1. / (1. + step))

  def train_step(self, train_state, batch):
    new_rng, rng = jax.random.split(train_state.rng)
    dropout_rng = pipeline_utils.bind_rng_to_host_device(
        rng, axis_name='batch', bind_to=['host', 'device'])
    train_loss_fn = functools.partial(
        self.training_loss_fn,
        train_state=train_state,
        batch=batch,
        dropout_rng=dropout_rng)
    return self.compute_grads_and_update(batch, new_rng, train_loss_fn,
                                         train_state)

  def compute_grads_and_update(self, batch, new_rng, train_loss_fn,
                               train_state):
    lr = self.get_learning_rate(train_state.global_step)
    compute_gradient_fn = jax.value_and_grad(train_loss_fn, has_aux=True)
    (loss, (new_model_state,
            logits)), grad = compute_gradient_fn(train_state.optimizer.target)
    grad = jax.lax.pmean(grad, axis_name='batch')
    new_optimizer = train_state.optimizer.apply_gradient(grad, learning_rate=lr)
    new_train_state = train_state.replace(
        global_step=train_state.global_step + 1,
        optimizer=new_optimizer,
        model_state=new_model_state,
        rng=new_rng)
    metric_dict = metrics_fn(logits, batch)
    metric_dict['learning_rate'] = lr
    metric_dict['train_loss'] = loss
    return new_train_state, metric_dict

  def eval_step(self, train_state, batch):
    return pipeline_utils.eval_step(train_state, batch, metrics_fn)


def images(seed, shape):
  return jnp.asarray(
      np.random.RandomState(seed).uniform(-1, 1, shape).astype(np.float32))


def run(name, cfg, results, save):
  hparams = ml_collections.ConfigDict(dict(cfg))
  model_cls = all_models.get_model_class(hparams.model_name)
  flax_module_def, hparams = model_cls.build_flax_module(hparams)
  size = hparams.image
  input_shape = (-1, size, size, 3)
  rng = jax.random.PRNGKey(17)
  rng, dropout_rng = jax.random.split(rng)
  flax_module, model_state, num_params = pipeline_utils.create_flax_module(
      flax_module_def, input_shape, hparams, dropout_rng, jnp.float32)
  for k, v in flat(flax_module.params).items():
    results[f'{name}:init:{k}'] = v
  for k, v in flat_state(model_state).items():
    results[f'{name}:init_state:{k}'] = v
  results[f'{name}:num_params'] = np.asarray(num_params)

  flax_module = flax_module.replace(params=fixed_params(flax_module.params))
  b = hparams.batch_size
  x = images(1, (b, size, size, 3))
  labels = jnp.asarray(np.arange(b) % 3, jnp.int32)

  # evaluation mode
  with nn.stateful(model_state, mutable=False):
    logits = flax_module(x, train=False)
  results[f'{name}:eval_logits'] = np.asarray(logits)

  # Trainer.forward_pass: the representations, under nn.stochastic
  with nn.stochastic(jax.random.PRNGKey(3)):
    (logits, all_reps, selected_reps,
     new_state) = pipeline_utils.forward_pass_with_reps(
         x, flax_module, model_state, 'input', True)
  results[f'{name}:reps:logits'] = np.asarray(logits)
  results[f'{name}:reps:selected'] = np.asarray(selected_reps)
  for k, v in all_reps.items():
    results[f'{name}:reps:all:{k}'] = np.asarray(v)
  for k, v in flat_state(new_state).items():
    results[f'{name}:reps:state:{k}'] = v

  if hparams.get('has_discriminator', False):
    with nn.stochastic(jax.random.PRNGKey(4)):
      (logits, domain_logits, _, key_reps,
       _) = pipeline_utils.dann_forward_pass(x, flax_module, model_state,
                                             'input', True)
    results[f'{name}:dann:logits'] = np.asarray(logits)
    results[f'{name}:dann:domain_logits'] = np.asarray(domain_logits)

    def dann_loss(model):
      with nn.stochastic(jax.random.PRNGKey(4)):
        (logits, domain_logits, _, _,
         _) = pipeline_utils.dann_forward_pass(x, model, model_state,
                                               'input', True)
      return jnp.sum(logits**2) + jnp.sum(domain_logits**2)

    grad = jax.grad(dann_loss)(flax_module)
    for k, v in flat(grad.params).items():
      results[f'{name}:dann_grad:{k}'] = v

  # the vmapped forward passes over two environments
  envs = jnp.stack([x, images(2, x.shape)])
  with nn.stateful(model_state, mutable=False):
    vlogits = pipeline_utils.vmapped_flax_module_eval(flax_module, envs)
  results[f'{name}:vmap_eval'] = np.asarray(vlogits)
  with nn.stochastic(jax.random.PRNGKey(5)):
    vlogits, vstate = pipeline_utils.vmapped_flax_module_train(
        flax_module, model_state, envs)
  results[f'{name}:vmap_train'] = np.asarray(vlogits)
  for k, v in flat_state(vstate).items():
    results[f'{name}:vmap_train_state:{k}'] = v
  with nn.stochastic(jax.random.PRNGKey(6)):
    vout = pipeline_utils.vmapped_flax_module_with_reps(
        envs, flax_module, model_state, 'input', False)
  results[f'{name}:vmap_reps:logits'] = np.asarray(vout[0])
  results[f'{name}:vmap_reps:selected'] = np.asarray(vout[2])
  save()

  # training, as Trainer.set_train_state and Trainer.train do
  optimizer = optimizers.get_optimizer(hparams).create(flax_module)
  rng, train_rng = jax.random.split(rng)
  train_state = pipeline_utils.TrainState(
      global_step=0,
      optimizer=optimizer,
      model_state=model_state,
      rng=train_rng)
  train_state = jax_utils.replicate(train_state)
  trainer = MiniTrainer(hparams)
  pmapped_train_step = jax.pmap(
      trainer.train_step, axis_name='batch', in_axes=(0, 0))
  pmapped_eval_step = jax.pmap(
      trainer.eval_step, axis_name='batch', in_axes=(0, 0))
  n = jax.local_device_count()
  for step in range(2):
    batch = {'inputs': images(10 + step, (n, b, size, size, 3)),
             'label': jnp.tile(labels[None], (n, 1))}
    train_state, t_metrics = pmapped_train_step(train_state, batch)
    results[f'{name}:train{step}:loss'] = np.asarray(t_metrics['train_loss'])
    results[f'{name}:train{step}:lr'] = np.asarray(t_metrics['learning_rate'])
  train_state = pipeline_utils.sync_model_state_across_replicas(train_state)
  one = jax.device_get(jax_utils.unreplicate(train_state))
  results[f'{name}:train:global_step'] = np.asarray(one.global_step)
  for k, v in flat(one.optimizer.target.params).items():
    results[f'{name}:trained:{k}'] = v
  for k, v in flat_state(one.model_state).items():
    results[f'{name}:trained_state:{k}'] = v
  e_metrics = pmapped_eval_step(train_state, batch)
  results[f'{name}:eval:loss'] = np.asarray(e_metrics['loss'][0])
  results[f'{name}:eval:accuracy'] = np.asarray(e_metrics['accuracy'])
  save()


def main(out):
  results = {}

  def save():
    np.savez(out, **results)

  for name, cfg in CONFIGS.items():
    run(name, cfg, results, save)
  save()
  print('saved', len(results), 'arrays to', out)
  print('flaxlegacy imported:', 'flaxlegacy' in sys.modules)


if __name__ == '__main__':
  main(sys.argv[1])
