"""Drives yang-song/score_sde (linen 0.3 models trained through flax.optim)
on CPU.

Written for flaxlegacy's checks (not part of score_sde): does what
run_lib.train does, without data sets, TF summaries or downloads, for tiny
versions of two of its configurations (DDPM / VP discrete, NCSN++ / VE
continuous):
``mutils.init_model`` (linen ``init`` with params + dropout rngs,
``variables.pop('params')``), ``losses.get_optimizer(config).create``
(``flax.optim.Adam``), the ``mutils.State`` struct holding the optimizer,
``losses.get_step_fn`` under ``jax.pmap(functools.partial(jax.lax.scan,
step_fn), axis_name='batch', donate_argnums=1)`` over a replicated state
(gradient clipping, warm-up, ``apply_gradient(g, learning_rate=lr)``, EMA),
an evaluation step, a checkpoint saved and restored, and a few steps of the
PC sampler.

The parameters are overwritten after init with numbers drawn from numpy
(linen derives parameter keys differently across versions) and dropout is 0
unless ``--dropout`` (its masks depend on linen's rng derivation).

Usage: python drive_score_sde.py OUT.npz [--dropout] (score_sde's root on
sys.path, and its configs/)
"""
import functools
import sys
import tempfile

import numpy as np

import jax
import jax.numpy as jnp
import flax
import flax.jax_utils as flax_utils
from flax.training import checkpoints

import losses
import sampling
import sde_lib
from models import ddpm, ncsnpp, ncsnv2  # registers the models
from models import utils as mutils

from configs.vp.ddpm import cifar10 as ddpm_cifar10
from configs.ve import cifar10_ncsnpp_continuous


def tiny(config, dropout):
  config.data.image_size = 8
  config.training.batch_size = 2
  config.training.n_jitted_steps = 1
  config.model.nf = 32
  config.model.ch_mult = (1, 2)
  config.model.num_res_blocks = 1
  config.model.attn_resolutions = (4,)
  config.model.num_scales = 40  # VP betas up to 20 / N: below 1
  config.model.dropout = 0.1 if dropout else 0.0
  config.optim.warmup = 3
  config.optim.weight_decay = 0
  config.sampling.n_steps_each = 1
  return config


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


def fixed_params(params):
  """Numbers drawn from numpy, leaf by leaf in path order."""
  rng = np.random.RandomState(0)
  leaves = flat(params)
  new = {k: (0.2 * rng.standard_normal(v.shape) / np.sqrt(
      max(1, v.size // max(1, v.shape[-1] if v.ndim else 1)))).astype(v.dtype)
         for k, v in sorted(leaves.items())}
  nested = {}
  for k, v in new.items():
    d = nested
    *head, last = k.split('/')
    for h in head:
      d = d.setdefault(h, {})
    d[last] = jnp.asarray(v)
  if isinstance(params, flax.core.FrozenDict):
    return flax.core.freeze(nested)
  return nested


def make_sde(config):
  name = config.training.sde.lower()
  if name == 'vpsde':
    return sde_lib.VPSDE(beta_min=config.model.beta_min,
                         beta_max=config.model.beta_max,
                         N=config.model.num_scales), 1e-3
  if name == 'subvpsde':
    return sde_lib.subVPSDE(beta_min=config.model.beta_min,
                            beta_max=config.model.beta_max,
                            N=config.model.num_scales), 1e-3
  return sde_lib.VESDE(sigma_min=config.model.sigma_min,
                       sigma_max=config.model.sigma_max,
                       N=config.model.num_scales), 1e-5


def run(name, config, results):
  rng = jax.random.PRNGKey(config.seed)
  rng, step_rng = jax.random.split(rng)
  score_model, init_model_state, initial_params = mutils.init_model(
      step_rng, config)
  for k, v in flat(initial_params).items():
    results[f'{name}/init:{k}'] = v
  initial_params = fixed_params(initial_params)
  optimizer = losses.get_optimizer(config).create(initial_params)
  state = mutils.State(step=0, optimizer=optimizer, lr=config.optim.lr,
                       model_state=init_model_state,
                       ema_rate=config.model.ema_rate,
                       params_ema=initial_params,
                       rng=rng)

  sde, sampling_eps = make_sde(config)
  optimize_fn = losses.optimization_manager(config)
  continuous = config.training.continuous
  reduce_mean = config.training.reduce_mean
  likelihood_weighting = config.training.likelihood_weighting
  train_step_fn = losses.get_step_fn(
      sde, score_model, train=True, optimize_fn=optimize_fn,
      reduce_mean=reduce_mean, continuous=continuous,
      likelihood_weighting=likelihood_weighting)
  eval_step_fn = losses.get_step_fn(
      sde, score_model, train=False, optimize_fn=optimize_fn,
      reduce_mean=reduce_mean, continuous=continuous,
      likelihood_weighting=likelihood_weighting)
  p_train_step = jax.pmap(functools.partial(jax.lax.scan, train_step_fn),
                          axis_name='batch', donate_argnums=1)
  p_eval_step = jax.pmap(functools.partial(jax.lax.scan, eval_step_fn),
                         axis_name='batch', donate_argnums=1)

  pstate = flax_utils.replicate(state)
  n = config.training.n_jitted_steps
  size = config.data.image_size
  images = np.random.RandomState(1).uniform(
      size=(1, n, config.training.batch_size, size, size, 3)).astype(
          np.float32)
  if config.data.centered:
    images = images * 2. - 1.
  batch = {'image': jnp.asarray(images)}
  rng = jax.random.fold_in(rng, jax.host_id())
  losses_seen = []
  for _ in range(2):
    rng, *next_rng = jax.random.split(rng, num=jax.local_device_count() + 1)
    next_rng = jnp.asarray(next_rng)
    (_, pstate), ploss = p_train_step((next_rng, pstate), batch)
    losses_seen.append(np.asarray(ploss))
  results[f'{name}/train_loss'] = np.stack(losses_seen)
  rng, *next_rng = jax.random.split(rng, num=jax.local_device_count() + 1)
  (_, _), peval = p_eval_step((jnp.asarray(next_rng), pstate), batch)
  results[f'{name}/eval_loss'] = np.asarray(peval)

  saved = flax.jax_utils.unreplicate(pstate)
  results[f'{name}/step'] = np.asarray(saved.step)
  for k, v in flat(saved.optimizer.target).items():
    results[f'{name}/trained:{k}'] = v
  for k, v in flat(saved.params_ema).items():
    results[f'{name}/ema:{k}'] = v

  # a checkpoint of the whole state, restored into a fresh one
  with tempfile.TemporaryDirectory() as d:
    checkpoints.save_checkpoint(d, saved, step=int(saved.step), keep=1)
    restored = checkpoints.restore_checkpoint(d, state)
  results[f'{name}/restored_step'] = np.asarray(restored.step)
  for k, v in flat(restored.optimizer.target).items():
    np.testing.assert_array_equal(v, flat(saved.optimizer.target)[k])

  # the PC sampler, on the EMA parameters (as run_lib's snapshots)
  shape = (1, size, size, 3)
  sampling_fn = sampling.get_sampling_fn(config, sde, score_model, shape,
                                         lambda x: x, sampling_eps)
  sample_rng = jnp.asarray(jax.random.split(jax.random.PRNGKey(7), 1))
  sample, nfe = sampling_fn(sample_rng, flax_utils.replicate(restored))
  results[f'{name}/sample'] = np.asarray(sample)
  results[f'{name}/nfe'] = np.asarray(nfe)


def main(out, dropout):
  results = {}
  for name, module in [('ddpm', ddpm_cifar10),
                       ('ncsnpp', cifar10_ncsnpp_continuous)]:
    run(name, tiny(module.get_config(), dropout), results)
  np.savez(out, **results)
  print('saved', len(results), 'arrays; losses',
        [float(results[f'{n}/train_loss'].ravel()[-1])
         for n in ('ddpm', 'ncsnpp')],
        'flaxlegacy imported:', 'flaxlegacy' in sys.modules)


if __name__ == '__main__':
  main(sys.argv[1], '--dropout' in sys.argv[2:])
