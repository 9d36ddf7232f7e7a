"""RSS after each phase of a short ResNet run, one variant per process.

    python benchmarks/memory_phases.py legacy
    python benchmarks/memory_phases.py linen

Where the ``memory`` row of run.py differs, this says in which phase:
building the model, parameters and optimizer, or the train steps.  Linux
only (reads /proc/self/status).
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import flaxlegacy  # noqa: E402  pylint: disable=g-import-not-at-top
flaxlegacy.activate()

from benchmarks import models  # noqa: E402  pylint: disable=g-import-not-at-top
from benchmarks import run  # noqa: E402  pylint: disable=g-import-not-at-top


def main(argv):
  if len(argv) != 2 or argv[1] not in ('legacy', 'linen'):
    sys.exit('usage: memory_phases.py legacy|linen')
  variant = argv[1]
  cfg = run.SIZES['cpu']
  mib = lambda field: run._rss_kb(field) / 1024  # pylint: disable=protected-access  # noqa: E731
  base = mib('VmRSS')

  def report(phase):
    print(f'{variant:6} {phase:28} RSS {mib("VmRSS") - base:7.0f} MiB   '
          f'peak {mib("VmHWM") - base:7.0f} MiB  (above post-import)')

  step, state, batch = models.build_resnet(
      variant, cfg['resnet_batch'], cfg['resnet'], cfg['image'], cfg['width'])
  report('model, params, optimizer')
  run._stepper(step, state, batch, 1)()  # pylint: disable=protected-access
  report('after 1 step')
  run._stepper(step, state, batch, cfg['memory_steps'] - 1)()  # pylint: disable=protected-access
  report(f'after {cfg["memory_steps"]} steps')


if __name__ == '__main__':
  main(sys.argv)
