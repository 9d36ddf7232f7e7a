"""Smoke test of ensembling.diff (run by howtos/check_diffs.py on 8 devices).

One member per device, each from its own key (members differ); the logged
ensemble metrics are those of the members' probabilities averaged over the
devices, recomputed here member by member on the host.
"""

import re

import jax
import jax.numpy as jnp
import numpy as onp

import smoke_lib
import train

EPOCH = re.compile(
    r'epoch (\d+)  members train loss: ([\d. ]+), test accuracy: ([\d. ]+)  \|'
    r'  ensemble test loss: ([\d.]+), accuracy: ([\d.]+)$')


def main():
  devices = jax.device_count()
  assert devices == 8, f'expected 8 CPU devices, got {devices}'
  smoke_lib.cap_datasets(train)
  tests = smoke_lib.run_example_tests()
  (optimizer, accuracy), lines = smoke_lib.run_main(
      train, ['--num_epochs=1', '--batch_size=32'])

  epochs = [EPOCH.match(l) for l in lines if EPOCH.match(l)]
  assert [int(m.group(1)) for m in epochs] == [1], '\n'.join(lines)
  member_acc = [float(x) for x in epochs[0].group(3).split()]
  ens_loss, ens_acc = float(epochs[0].group(4)), float(epochs[0].group(5))
  assert len(member_acc) == devices, member_acc
  assert round(accuracy * 100, 2) == ens_acc, (accuracy, ens_acc)

  # Members differ from each other, in every layer.
  params = jax.device_get(optimizer.target.params)
  for leaf in jax.tree_util.tree_leaves(params):
    assert leaf.shape[0] == devices, leaf.shape
    for i in range(1, devices):
      assert not onp.allclose(leaf[0], leaf[i]), f'members 0 and {i} agree'

  # The ensemble predicts the mean of the members' probabilities.
  _, test_ds = train.get_datasets()
  members = [jax.tree_util.tree_map(lambda x, i=i: x[i], optimizer.target)
             for i in range(devices)]
  predict = jax.jit(lambda model, x: model(x))
  images = jnp.asarray(test_ds['image'])
  log_probs = onp.stack([onp.asarray(predict(m, images)) for m in members])
  labels = test_ds['label']
  got_member_acc = [round(float(onp.mean(lp.argmax(-1) == labels)) * 100, 2)
                    for lp in log_probs]
  assert got_member_acc == member_acc, (got_member_acc, member_acc)
  probs = onp.exp(log_probs.astype(onp.float64)).mean(0)
  want_loss = -onp.mean(onp.log(probs[onp.arange(len(labels)), labels]))
  want_acc = float(onp.mean(probs.argmax(-1) == labels)) * 100
  assert abs(want_loss - ens_loss) < 2e-4, (want_loss, ens_loss)
  assert abs(want_acc - ens_acc) < 0.006, (want_acc, ens_acc)
  assert len(set(member_acc)) > 1, member_acc

  smoke_lib.report('ensembling', example_tests=tests, devices=devices,
                   member_accuracy=member_acc, ensemble_loss=ens_loss,
                   ensemble_accuracy=ens_acc)


if __name__ == '__main__':
  main()
