"""Records tests/early_linen/flax036.json under real flax 0.3.6 linen.

Run with the oracle's interpreter (flax 0.3.6 on jax 0.4.13), from the
repository root:

    /path/to/oracle-0.3.6/bin/python tests/early_linen/record_flax036.py

It initialises and applies every model of ``models.py`` from ``PRNGKey(0)``
and writes each variable and output (float32 values as exact decimal
strings).  Then, in a second interpreter (``--x64``: the models enable
``jax_enable_x64`` as the library they come from did), it records the
models of ``stated_dtypes.py`` into flax036_x64.json (float64 values as
exact decimal strings, complex ones as [real, imaginary]).  CI has no
oracle: the files are committed, and tests/test_early_linen.py compares
the layer's numbers with them.
"""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import flax  # pylint: disable=g-import-not-at-top,wrong-import-position
import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import models  # pylint: disable=g-import-not-at-top,wrong-import-position


def _values(v):
  if v.dtype.kind == 'c':
    return [[repr(float(x.real)), repr(float(x.imag))] for x in v.ravel()]
  return [repr(float(x)) for x in v.ravel()]


def main():
  if not flax.__version__.startswith('0.3.'):
    sys.exit(f'run this under flax 0.3.x (found flax {flax.__version__})')
  if sys.argv[1:] == ['--x64']:
    import stated_dtypes  # pylint: disable=g-import-not-at-top
    arrays = stated_dtypes.record()
    data = {
        'flax': flax.__version__,
        'jax': jax.__version__,
        'arrays': {k: {'shape': list(v.shape), 'dtype': str(v.dtype),
                       'values': _values(v)}
                   for k, v in sorted(arrays.items())},
    }
    with open(os.path.join(HERE, 'flax036_x64.json'), 'w') as f:
      json.dump(data, f, indent=0, sort_keys=True)
      f.write('\n')
    print(f'{len(arrays)} x64 arrays from flax {flax.__version__} / jax '
          f'{jax.__version__}')
    return
  arrays = models.record()
  data = {
      'flax': flax.__version__,
      'jax': jax.__version__,
      'arrays': {k: {'shape': list(v.shape), 'dtype': str(v.dtype),
                     'values': [repr(float(x)) for x in v.ravel()]}
                 for k, v in sorted(arrays.items())},
  }
  with open(os.path.join(HERE, 'flax036.json'), 'w') as f:
    json.dump(data, f, indent=0, sort_keys=True)
    f.write('\n')
  print(f'{len(arrays)} arrays from flax {flax.__version__} / jax '
        f'{jax.__version__}')
  subprocess.run([sys.executable, os.path.abspath(__file__), '--x64'],
                 check=True)


if __name__ == '__main__':
  main()
