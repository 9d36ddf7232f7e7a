"""Smoke test of sharded-training.diff (run by howtos/check_diffs.py on 8
devices).

With --model_parallelism=2 the mesh is 4 ('data') x 2 ('model'): every kernel
and its momentum stay split on their output features over 'model', biases
and the step count replicated, batches split over 'data'; and the sharded
run computes what one device computes.
"""

import ast
import re

import jax
from jax import random
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import numpy as onp

import smoke_lib
import train

MESH = re.compile(r'mesh (\{.*?\}); parameters: (\{.*\})$')
EPOCH = re.compile(r'epoch 1  train loss: ([\d.]+), accuracy: ([\d.]+)  \|  ')


def expected_spec(shape):
  if len(shape) >= 2 and shape[-1] % 2 == 0:
    return P(*(None,) * (len(shape) - 1), 'model')
  return P()


def main():
  assert jax.device_count() == 8, jax.devices()
  smoke_lib.cap_datasets(train)
  tests = smoke_lib.run_example_tests()
  (optimizer, _), lines = smoke_lib.run_main(train, [
      '--num_epochs=1', '--batch_size=32', '--model_parallelism=2'])
  (mesh_line,) = [MESH.match(l) for l in lines if MESH.match(l)]
  assert ast.literal_eval(mesh_line.group(1)) == {'data': 4, 'model': 2}
  logged_specs = ast.literal_eval(mesh_line.group(2))
  assert logged_specs['Dense_2'] == {'bias': (), 'kernel': (None, 'model')}, (
      logged_specs)

  # Every leaf of the trained optimizer (params, momentum, step) is where
  # the rule puts it, and each device holds its part only.
  leaves = jax.tree_util.tree_leaves_with_path(optimizer)
  assert len(leaves) == 17, len(leaves)  # 8 params, 8 momenta, 1 step
  split = 0
  for path, leaf in leaves:
    name = jax.tree_util.keystr(path)
    want = expected_spec(leaf.shape)
    assert isinstance(leaf.sharding, NamedSharding), (name, leaf.sharding)
    assert dict(leaf.sharding.mesh.shape) == {'data': 4, 'model': 2}, name
    assert leaf.sharding.spec == want, (name, leaf.sharding.spec, want)
    shard_shape = leaf.addressable_shards[0].data.shape
    if want == P():
      assert shard_shape == leaf.shape, (name, shard_shape)
    else:
      split += 1
      assert shard_shape == leaf.shape[:-1] + (leaf.shape[-1] // 2,), (
          name, shard_shape)
  assert split == 8, split  # 4 kernels and their 4 momenta

  # The compiled step splits the batch over 'data'.
  mesh = train.create_mesh(2)
  fresh = train.create_optimizer(
      train.create_model(random.PRNGKey(0)), 0.1, 0.9)
  shardings = train.optimizer_sharding(mesh, fresh)
  train_ds, _ = train.get_datasets()
  batch = {k: v[:32] for k, v in train_ds.items()}
  compiled = train.shard_train_step(mesh, shardings).lower(
      jax.device_put(fresh, shardings), batch).compile()
  batch_in = compiled.input_shardings[0][1]
  assert {k: s.spec for k, s in batch_in.items()} == {
      'image': P('data'), 'label': P('data')}, batch_in

  # Same numbers as the unsharded step on one device, same keys.
  rng, init_rng = random.split(random.PRNGKey(0))
  _, epoch_rng = random.split(rng)
  single = train.create_optimizer(train.create_model(init_rng), 0.1, 0.9)
  single, metrics = train.train_epoch(jax.jit(train.train_step), single,
                                      train_ds, 32, epoch_rng)
  for (path, got), want in zip(
      leaves, jax.tree_util.tree_leaves(jax.device_get(single))):
    onp.testing.assert_allclose(onp.asarray(got), want, rtol=1e-5, atol=1e-6,
                                err_msg=jax.tree_util.keystr(path))
  (epoch,) = [EPOCH.match(l) for l in lines if EPOCH.match(l)]
  assert abs(float(epoch.group(1)) - metrics['loss']) <= 1e-4, (
      epoch.group(0), metrics)
  assert abs(float(epoch.group(2)) - metrics['accuracy'] * 100) <= 0.01, (
      epoch.group(0), metrics)

  smoke_lib.report('sharded-training', example_tests=tests,
                   mesh={'data': 4, 'model': 2}, split_leaves=split,
                   parameters=logged_specs)


if __name__ == '__main__':
  main()
