"""Runs tests/upgrade_programs/optimizers*/prog.py, legacy or upgraded.

usage: optimizers_driver.py legacy|upgraded OUT.npz CKPT_DIR|- NAME[:train]...

Three train steps per optimizer from the same initial parameters; with a
checkpoint directory, the legacy side then saves its optimizer and takes two
more steps, and the upgraded side restores the legacy checkpoint into a
fresh TrainState and takes the same two steps (except for a NAME:train,
which only trains: several tests share one process per side).
Both sides start from the legacy initial parameters (linen derives its
initialisation keys differently, so an upgraded program keeps legacy's
parameter *tree*, not its random draws): the legacy side writes them to
init.npz beside OUT, the upgraded side reads them into its model.
"""

import inspect
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

import prog

side, out, ckpt, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
per_step_lr = 'lr' in inspect.signature(prog.train_step).parameters
data = np.random.RandomState(0)  # not jax.random: legacy mode draws otherwise
x = jnp.asarray(data.normal(size=(2, 4)), jnp.float32)
y = jnp.asarray(data.normal(size=(2, 3)), jnp.float32)


def keyed(tree):
  return {jax.tree_util.keystr(k): np.asarray(v)
          for k, v in jax.tree_util.tree_leaves_with_path(tree)}


def initial_model():
  model = prog.create_model(jax.random.PRNGKey(0))
  init = os.path.join(os.path.dirname(os.path.abspath(out)), 'init.npz')
  if side == 'legacy':
    np.savez(init, **keyed(model.params))
    return model
  legacy = np.load(init)
  assert sorted(legacy) == sorted(keyed(model)), (sorted(legacy),
                                                  sorted(keyed(model)))
  return jax.tree_util.tree_map_with_path(
      lambda k, v: jnp.asarray(legacy[jax.tree_util.keystr(k)]), model)


def params(opt):
  return opt.target.params if side == 'legacy' else opt.params


def steps(opt, first, n):
  for i in range(first, first + n):
    args = (jnp.float32(0.1 / (i + 1)),) if per_step_lr else ()
    opt = prog.train_step(opt, x, y, *args)
  return opt


result = {}
for arg in names:
  name, _, only = arg.partition(':')
  model = initial_model()
  opt = steps(prog.create_optimizer(name, model), 0, 3)
  result.update({name + k: v for k, v in keyed(params(opt)).items()})
  if ckpt != '-' and only != 'train':
    d = os.path.join(ckpt, name)
    if side == 'legacy':
      prog.save(d, opt)
    else:
      opt = prog.restore(d, prog.create_optimizer(name, model))
      result[f'{name}/restored_step'] = np.asarray(opt.step)
    opt = steps(opt, 3, 2)
    result.update({f'{name}/resumed{k}': v
                   for k, v in keyed(params(opt)).items()})
np.savez(out, **result)
