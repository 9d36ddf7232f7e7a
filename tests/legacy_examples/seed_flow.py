"""Records an MNIST program's seed flow with its training stubbed out.

    python seed_flow.py PROGRAM.py OUT.npz [PROGRAM FLAGS...]

Imports PROGRAM.py (the example or a re-enacted legacy program) as a module
and runs its own ``main`` with three of its functions wrapped, so that what
is recorded comes from the program's own code paths:

* ``create_model``: the initial parameters;
* ``get_datasets``: adds an ``index`` column to the train set, so every
  batch the program's ``train_epoch`` cuts says which examples it holds;
* ``train_step``: records each batch's indices and returns the optimizer
  unchanged (no training, so this runs in seconds); the first call also runs
  the program's real ``train_step`` once and records its loss and updated
  parameters;
* ``eval_model``: records the program's own evaluation (of the initial
  parameters, since nothing is trained) on its test set.

tests/test_examples_mnist.py compares two programs' records: the same keys
in the same order must give the same parameters and the same batches, and
one real step / one evaluation of identical parameters must agree to float
rounding of the input preparation.
"""

import importlib.util
import sys

from absl import flags
import jax
import numpy as np


def _flat(tree, prefix=''):
  """{'Conv_0/kernel': array, ...} of a Model's params."""
  out = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      out.update(_flat(value, f'{prefix}{key}/'))
    else:
      out[prefix + key] = np.asarray(value)
  return out


def main():
  program_path, out_path = sys.argv[1:3]
  spec = importlib.util.spec_from_file_location('program', program_path)
  program = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(program)
  flags.FLAGS([program_path] + sys.argv[3:])

  record = {'indices': [], 'eval': []}
  create_model = program.create_model
  get_datasets = program.get_datasets
  train_step = program.train_step
  eval_model = program.eval_model

  def recording_create_model(key):
    model = create_model(key)
    record['init'] = _flat(jax.device_get(model.params))
    return model

  def recording_get_datasets():
    train_ds, test_ds = get_datasets()
    train_ds['index'] = np.arange(len(train_ds['label']))
    return train_ds, test_ds

  def recording_train_step(optimizer, batch):
    record['indices'].append(np.asarray(batch['index']))
    if 'step' not in record:
      real_batch = {k: v for k, v in batch.items() if k != 'index'}
      stepped, metrics = train_step(optimizer, real_batch)
      record['step'] = (float(metrics['loss']),
                        _flat(jax.device_get(stepped.target.params)))
      record['first_images'] = np.asarray(real_batch['image'])
    return optimizer, {'loss': np.float32(0), 'accuracy': np.float32(0)}

  def recording_eval_model(model, test_ds):
    loss, accuracy = eval_model(model, test_ds)
    record['eval'].append((loss, accuracy))
    return loss, accuracy

  program.create_model = recording_create_model
  program.get_datasets = recording_get_datasets
  program.train_step = recording_train_step
  program.eval_model = recording_eval_model
  program.main([program_path])

  arrays = {'indices': np.stack(record['indices']),
            'eval': np.array(record['eval'], np.float64),
            'step_loss': np.float64(record['step'][0]),
            'first_images': record['first_images']}
  arrays.update({'init/' + k: v for k, v in record['init'].items()})
  arrays.update({'step/' + k: v for k, v in record['step'][1].items()})
  np.savez(out_path, **arrays)


if __name__ == '__main__':
  main()
