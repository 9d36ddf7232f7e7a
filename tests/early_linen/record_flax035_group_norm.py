"""Records tests/early_linen/flax035_group_norm.json under real flax 0.3.5.

Run with the oracle's interpreter (flax 0.3.5 on jax 0.4.13), from the
repository root:

    /path/to/oracle-0.3.5/bin/python tests/early_linen/record_flax035_group_norm.py

It applies every case of ``group_norm.py`` with its parameters in flax
0.3.5's own layout, ``(1, ..., 1, C)``, and writes each output (float32
values as exact decimal strings) and the shapes ``init`` gives the
parameters there.  CI has no oracle: the file is committed, and
tests/test_early_linen_group_norm.py compares the layer's outputs with it.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import flax  # pylint: disable=g-import-not-at-top,wrong-import-position
import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
from flax import linen as nn  # pylint: disable=g-import-not-at-top,wrong-import-position
import group_norm  # pylint: disable=g-import-not-at-top,wrong-import-position


def main():
  if flax.__version__ != '0.3.5':
    sys.exit(f'run this under flax 0.3.5 (found flax {flax.__version__})')
  outputs = group_norm.record('legacy')
  init = nn.GroupNorm(num_groups=3).init(jax.random.PRNGKey(0),
                                         np.ones((2, 4, 3, 6), np.float32))
  data = {
      'flax': flax.__version__,
      'jax': jax.__version__,
      'init_shapes': {k: list(v.shape) for k, v in init['params'].items()},
      'arrays': {k: {'shape': list(v.shape), 'dtype': str(v.dtype),
                     'values': [repr(float(x)) for x in v.ravel()]}
                 for k, v in sorted(outputs.items())},
  }
  with open(os.path.join(HERE, 'flax035_group_norm.json'), 'w') as f:
    json.dump(data, f, indent=0, sort_keys=True)
    f.write('\n')
  print(f'{len(outputs)} outputs from flax {flax.__version__} / jax '
        f'{jax.__version__}')


if __name__ == '__main__':
  main()
