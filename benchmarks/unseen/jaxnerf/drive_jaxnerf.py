"""Drives google-research's jaxnerf (flax.nn NerfModel, flax.optim Adam) on CPU.

Written for flaxlegacy's checks (not part of jaxnerf): builds the model as
``models.get_model(key, example_batch, args)`` does (``NerfModel.partial``,
``model_fn.init`` inside ``nn.stateful()``, ``nn.Model``) for a tiny
configuration (4 rays, 4 coarse + 4 fine samples, coarse MLP 3 x 16; the
fine MLP is always 8 x 256 in this version of models.py: it is called
without the size keywords), renders random rays in randomized mode (the
stratified samples, the hierarchical pdf samples and the density noise all
come from the two rng arguments), and does one training step the way
train.py does: ``optim.Adam(lr).create(model)``, the ``TrainState`` struct,
``jax_utils.replicate``, ``jax.pmap(train_step, axis_name='batch',
in_axes=(0, 0, 0, None), donate_argnums=2)`` with ``nn.stateful`` in the
loss, ``pmean`` of gradients and stats, ``apply_gradient(grad,
learning_rate=lr)``; then the evaluation render function (pmap of
``all_gather`` of the model called under ``nn.stateful(state,
mutable=False)``).

The parameters are overwritten after init with numbers drawn from numpy, so
that both sides compute from the same weights.

Usage: python drive_jaxnerf.py OUT.npz   (jaxnerf's parent on sys.path)
"""
import collections
import functools
import sys
import types

import numpy as np

import flax
from flax import jax_utils
from flax import nn
from flax import optim
import jax
from jax import random
import jax.numpy as jnp

from jaxnerf.nerf import model_utils
from jaxnerf.nerf import models


def _accept_lists():
  """jaxnerf's volumetric_rendering calls jnp.broadcast_to([1e10], shape):
  jax of 2020 took a Python list there, jax >= 0.4 raises TypeError (on the
  oracle's jax 0.4.13 too). Not Flax drift: the driver restores it, on both
  sides alike."""
  orig = jnp.broadcast_to
  try:
    orig([1.], (1,))
  except TypeError:
    jnp.broadcast_to = lambda a, shape: orig(
        np.asarray(a) if isinstance(a, (list, tuple)) else a, shape)


_accept_lists()

Rays = collections.namedtuple('Rays', ('origins', 'directions', 'viewdirs'))
Stats = flax.struct.dataclass(
    type('Stats', (), {'__annotations__': {'loss': float, 'psnr': float}}))

ARGS = types.SimpleNamespace(
    model='nerf', near=2., far=6., net_depth=3, net_width=16,
    net_depth_condition=1, net_width_condition=8, skip_layer=2,
    num_rgb_channels=3, num_sigma_channels=1, randomized=True, deg_point=2,
    deg_view=1, num_coarse_samples=4, num_fine_samples=4, use_viewdirs=True,
    noise_std=0.5, lindisp=False, net_activation='relu',
    rgb_activation='sigmoid', sigma_activation='relu', white_bkgd=True,
    tf_posenc_order=False, lr=5e-3)


def flat(tree, prefix=''):
  out = {}
  tree = flax.core.unfreeze(tree) if hasattr(tree, 'unfreeze') else tree
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


def make_rays(n, seed):
  r = np.random.RandomState(seed)
  origins = r.uniform(-1, 1, (n, 3)).astype(np.float32)
  directions = r.standard_normal((n, 3)).astype(np.float32)
  viewdirs = directions / np.linalg.norm(directions, axis=-1, keepdims=True)
  return Rays(jnp.asarray(origins), jnp.asarray(directions),
              jnp.asarray(viewdirs))


def train_step(rng_key, state, batch, lr):
  """train.py's train_step (rays as a Rays tuple)."""
  rng_key, key_0, key_1 = random.split(rng_key, 3)

  def loss_fn(model):
    with nn.stateful(state.model_state) as new_model_state:
      ret = model(key_0, key_1, *batch['rays'])
    rgb, unused_disp, unused_acc = ret[-1]
    loss = ((rgb - batch['pixels'][Ellipsis, :3])**2).mean()
    psnr = -10. * jnp.log(loss) / jnp.log(10.)
    stats = [Stats(loss=loss, psnr=psnr)]
    rgb_c, unused_disp_c, unused_acc_c = ret[0]
    loss_c = ((rgb_c - batch['pixels'][Ellipsis, :3])**2).mean()
    psnr_c = -10. * jnp.log(loss_c) / jnp.log(10.)
    stats.append(Stats(loss=loss_c, psnr=psnr_c))
    return loss + loss_c, (new_model_state, stats)

  step = state.step
  optimizer = state.optimizer
  grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
  (unused_loss, (new_model_state, stats)), grad = grad_fn(optimizer.target)
  grad = jax.lax.pmean(grad, axis_name='batch')
  stats = jax.lax.pmean(stats, axis_name='batch')
  new_optimizer = optimizer.apply_gradient(grad, learning_rate=lr)
  new_state = state.replace(
      step=step + 1, optimizer=new_optimizer, model_state=new_model_state)
  return new_state, stats, rng_key


def main(out):
  results = {}
  key = random.PRNGKey(20200823)
  example = {'rays': Rays(*[x[None] for x in make_rays(4, 1)])}
  init_model, init_state = models.get_model(key, example, ARGS)
  for k, v in flat(init_model.params).items():
    results['init:' + k] = v
  results['init_state_len'] = np.asarray(len(flat(init_state.as_dict())))

  model = init_model.replace(params=fixed_params(init_model.params))
  for k, v in flat(model.params).items():
    results['fixed:' + k] = v

  # forward in randomized (training) mode
  rays = make_rays(4, 2)
  key_0, key_1 = random.split(random.PRNGKey(3))
  with nn.stateful(init_state, mutable=False):
    ret = model(key_0, key_1, rays.origins, rays.directions, rays.viewdirs)
  for i, (rgb, disp, acc) in enumerate(ret):
    results[f'fwd:{i}:rgb'] = np.asarray(rgb)
    results[f'fwd:{i}:disp'] = np.asarray(disp)
    results[f'fwd:{i}:acc'] = np.asarray(acc)

  # the gradient of the training loss (outside pmap): Adam's first step is
  # lr * g / (|g| + eps), rounding noise of a gradient near eps shows there
  def loss_only(model):
    with nn.stateful(init_state) as unused_state:
      ret = model(key_0, key_1, rays.origins, rays.directions, rays.viewdirs)
    return sum(((r[0] - 0.5)**2).mean() for r in ret)

  grad = jax.grad(loss_only)(model)
  for k, v in flat(grad.params).items():
    results['grad:' + k] = v

  # one training step as train.py does it
  optimizer = optim.Adam(ARGS.lr).create(model)
  state = model_utils.TrainState(
      step=0, optimizer=optimizer, model_state=init_state)
  state = jax_utils.replicate(state)
  ptrain_step = jax.pmap(
      train_step, axis_name='batch', in_axes=(0, 0, 0, None),
      donate_argnums=2)
  n = jax.local_device_count()
  keys = random.split(random.PRNGKey(5), n)
  pix = np.random.RandomState(4).uniform(0, 1, (n, 4, 3)).astype(np.float32)
  batch = {'rays': Rays(*[x.reshape((n, 4, 3)) for x in make_rays(4, 6)]),
           'pixels': jnp.asarray(pix)}
  state, stats, keys = ptrain_step(keys, state, batch, 5e-3)
  results['train:loss'] = np.asarray(stats[0].loss)
  results['train:loss_c'] = np.asarray(stats[1].loss)
  results['train:psnr'] = np.asarray(stats[0].psnr)
  results['train:step'] = np.asarray(state.step)
  results['train:keys'] = np.asarray(random.key_data(keys)
                                     if hasattr(random, 'key_data') else keys)
  state_to_eval = jax.device_get(jax.tree_util.tree_map(lambda x: x[0], state))
  for k, v in flat(state_to_eval.optimizer.target.params).items():
    results['trained:' + k] = v

  np.savez(out, **results)  # (again below, with the evaluation render)
  print('saved', len(results), 'arrays to', out,
        '- flaxlegacy imported:', 'flaxlegacy' in sys.modules)

  # the evaluation render function of train.py / eval.py
  render_fn = jax.pmap(
      lambda key_0, key_1, model, rays: jax.lax.all_gather(
          model(key_0, key_1, *rays), axis_name='batch'),
      in_axes=(None, None, None, 0),
      donate_argnums=3,
      axis_name='batch')
  erays = make_rays(4, 7)
  erays = Rays(*[x.reshape((n, 4, 3)) for x in erays])
  with nn.stateful(state_to_eval.model_state, mutable=False):
    eret = render_fn(key_0, key_1, state_to_eval.optimizer.target, erays)
  for i, (rgb, disp, acc) in enumerate(eret):
    results[f'eval:{i}:rgb'] = np.asarray(rgb)
    results[f'eval:{i}:disp'] = np.asarray(disp)

  np.savez(out, **results)
  print('saved', len(results), 'arrays to', out)
  print('fwd fine rgb', results['fwd:1:rgb'].ravel()[:4],
        'loss', results['train:loss'])
  print('flaxlegacy imported:', 'flaxlegacy' in sys.modules)


if __name__ == '__main__':
  main(sys.argv[1])
