"""Drives google-research/big_transfer's bit_jax (flax.nn ResNet-v2) on CPU.

Written for flaxlegacy's checks (not part of big_transfer): builds the model
the way bit_jax/train.py does (``KNOWN_MODELS[...].partial``,
``init_by_shape``, ``tf2jax.transform_params`` with random numpy weights in
the TF checkpoint's naming, ``optim.Momentum(beta=0.9).create``, a pmapped
``apply_gradient`` step over ``flax.jax_utils.replicate``), and saves the
parameters, logits, loss and updated parameters to ``OUT`` (np.savez).

Usage: python drive_bit.py OUT.npz   (with the repository root on sys.path)
"""
import sys
from functools import partial

import numpy as np

import jax
import jax.numpy as jnp

import flax.optim as optim
import flax.jax_utils as flax_utils

import bit_jax.models as models
import bit_jax.tf2jax as tf2jax


def fake_tf_params(params, rng):
  """Random weights under the names bit_jax/tf2jax.py reads."""
  out = {}

  def put(name, shape, scale=0.1):
    out[name] = (scale * rng.standard_normal(shape)).astype(np.float32)

  put('resnet/root_block/standardized_conv2d/kernel',
      params['root_block']['conv_root']['kernel'].shape)
  for block in ['block1', 'block2', 'block3', 'block4']:
    for unit, p in params[block].items():
      for i, group in enumerate(['a', 'b', 'c']):
        put(f'resnet/{block}/{unit}/{group}/standardized_conv2d/kernel',
            p[f'conv{i+1}']['kernel'].shape)
        c = p[f'gn{i+1}']['bias'].shape[-1]
        put(f'resnet/{block}/{unit}/{group}/group_norm/beta', (c,))
        put(f'resnet/{block}/{unit}/{group}/group_norm/gamma', (c,))
        out[f'resnet/{block}/{unit}/{group}/group_norm/gamma'] += 1.0
      if 'conv_proj' in p:
        put(f'resnet/{block}/{unit}/a/proj/standardized_conv2d/kernel',
            p['conv_proj']['kernel'].shape)
  c = params['norm-pre-head']['bias'].shape[-1]
  put('resnet/group_norm/beta', (c,))
  put('resnet/group_norm/gamma', (c,))
  return out


def flat(tree, prefix=''):
  out = {}
  for k in sorted(tree.keys()):
    v = tree[k]
    name = f'{prefix}/{k}' if prefix else str(k)
    if hasattr(v, 'keys'):
      out.update(flat(v, name))
    else:
      out[name] = np.asarray(v)
  return out


def summary(prefix, tree, full):
  out = {}
  for k, v in flat(tree).items():
    if full:
      out[f'{prefix}:{k}'] = v
    else:
      v64 = v.astype(np.float64)
      out[f'{prefix}:{k}'] = np.array(
          [v64.sum(), np.abs(v64).sum(), (v64 ** 2).sum()] +
          list(v64.ravel()[:8]) + [float(v.size)])
  return out


def run(name, num_classes, size, full, train=True):
  model = models.KNOWN_MODELS[name]
  ResNet = model.partial(num_classes=num_classes)
  _, params = ResNet.init_by_shape(
      jax.random.PRNGKey(0), [([1, size, size, 3], jnp.float32)])
  resnet_fn = ResNet.call
  results = summary(f'{name}/init', params, full)

  rng = np.random.RandomState(0)
  tf2jax.transform_params(params, fake_tf_params(params, rng),
                          num_classes=num_classes)
  # a non-zero head, so that the logits depend on every layer
  params['conv_head']['kernel'] = (
      0.05 * rng.standard_normal(params['conv_head']['kernel'].shape)
  ).astype(np.float32)

  images = rng.standard_normal((1, 2, size, size, 3)).astype(np.float32)
  labels = np.eye(num_classes, dtype=np.float32)[[[1, 3]]]

  def cross_entropy_loss(*, logits, labels):
    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.sum(logp * labels, axis=1))

  def loss_fn(params, images, labels):
    logits = resnet_fn(params, images)
    return cross_entropy_loss(logits=logits, labels=labels)

  @partial(jax.pmap, axis_name='batch')
  def update_fn(opt, lr, batch):
    l, g = jax.value_and_grad(loss_fn)(opt.target, batch['image'],
                                       batch['label'])
    g = jax.tree_map(lambda x: jax.lax.pmean(x, axis_name='batch'), g)
    opt = opt.apply_gradient(g, learning_rate=lr)
    return opt, l

  resnet_fn_repl = jax.pmap(ResNet.call)
  results[f'{name}/logits'] = np.asarray(resnet_fn(params, images[0]))
  if not train:
    return results

  opt = optim.Momentum(beta=0.9).create(params)
  opt_repl = flax_utils.replicate(opt)
  batch = {'image': images, 'label': labels}
  for _ in range(2):
    opt_repl, loss = update_fn(opt_repl, flax_utils.replicate(0.01), batch)
    results.setdefault(f'{name}/loss', [])
    results[f'{name}/loss'].append(float(loss[0]))
  results[f'{name}/loss'] = np.array(results[f'{name}/loss'])
  results[f'{name}/step'] = np.asarray(opt_repl.state.step)
  opt = flax_utils.unreplicate(opt_repl)
  results.update(summary(f'{name}/trained', opt.target, full))
  results[f'{name}/eval_logits'] = np.asarray(
      resnet_fn_repl(opt_repl.target, images))
  return results


def main(out):
  # A tiny ResNet-v2 (one unit per block) through the same table and
  # partials, trained two steps; the real BiT-S-R50x1 built and run once
  # (checked by per-leaf statistics).
  models._block_sizes[14] = [1, 1, 1, 1]
  models.KNOWN_MODELS['tiny-R14x1'] = models.ResNet.partial(
      num_layers=14, width_factor=1)
  results = {}
  results.update(run('tiny-R14x1', 10, 32, full=True))
  results.update(run('BiT-S-R50x1', 5, 32, full=False, train=False))
  np.savez(out, **results)
  print('saved', len(results), 'arrays;',
        'flaxlegacy imported:', 'flaxlegacy' in sys.modules)


if __name__ == '__main__':
  main(sys.argv[1])
