"""Legacy-style: restore the MNIST optimizer from a checkpoint directory
(when there is one), take STEPS steps on the first STEPS batches in order,
evaluate, save.  Run from a copy of examples/mnist (legacy, under
flaxlegacy) or from its ``flaxlegacy upgrade`` output (FLAXLEGACY=off)."""

import sys

from flax.training import checkpoints
import jax
from jax import random

import train

STEPS = 20
BATCH = 32


def main(ckpt_dir):
  train.FLAGS(['mnist_resume'])
  train_ds, test_ds = train.get_datasets()
  optimizer = train.create_optimizer(train.create_model(random.PRNGKey(0)),
                                     0.1, 0.9)
  optimizer = checkpoints.restore_checkpoint(ckpt_dir, optimizer)
  start = int(optimizer.state.step)
  loss, accuracy = train.eval_model(optimizer.target, test_ds)
  print(f'restored step {start} loss {loss:.6f} accuracy {accuracy:.6f}')
  for i in range(STEPS):
    batch = {k: v[i * BATCH:(i + 1) * BATCH] for k, v in train_ds.items()}
    optimizer, _ = train.train_step(optimizer, batch)
  loss, accuracy = train.eval_model(optimizer.target, test_ds)
  step = int(optimizer.state.step)
  print(f'trained step {step} loss {loss:.6f} accuracy {accuracy:.6f}')
  checkpoints.save_checkpoint(ckpt_dir, jax.device_get(optimizer), step,
                              keep=10)


if __name__ == '__main__':
  main(sys.argv[1])
