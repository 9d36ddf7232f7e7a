"""What the HOWTO smoke tests share.

A smoke test runs in the directory of a patched example (``check_diffs.py``
puts it and this directory on ``PYTHONPATH``).  It imports the patched
``train`` module, runs the patched ``train_test.py`` and then the program's
``main`` under ``absl.app.run`` with the arguments its command line would
have, recording what ``train`` returned and what was logged, and checks the
technique with plain assertions.  Its last line is ``SMOKE-RESULT {json}``.

Datasets are capped (``cap_datasets``) so that a smoke test takes seconds
whatever is prepared (the stand-in or the real MNIST).
"""

import json
import logging
import sys
import unittest

from absl import app
from absl import flags

FLAGS = flags.FLAGS

MAX_TRAIN = 512
MAX_TEST = 256


def cap_datasets(module, max_train=MAX_TRAIN, max_test=MAX_TEST):
  """Makes ``module.get_datasets`` return at most this many examples."""
  get_datasets = module.get_datasets

  def capped():
    train_ds, test_ds = get_datasets()
    return ({k: v[:max_train] for k, v in train_ds.items()},
            {k: v[:max_test] for k, v in test_ds.items()})

  module.get_datasets = capped


class _Lines(logging.Handler):

  def __init__(self):
    super().__init__(logging.INFO)
    self.lines = []

  def emit(self, record):
    self.lines.append(record.getMessage())


def run_example_tests(module_name='train_test'):
  """Runs the (patched) example's absltest tests in this process."""
  FLAGS.unparse_flags()
  FLAGS([module_name + '.py'])
  tests = unittest.defaultTestLoader.loadTestsFromName(module_name)
  result = unittest.TextTestRunner(stream=sys.stderr, verbosity=2).run(tests)
  problems = result.failures + result.errors
  assert not problems and result.testsRun, (
      f'{module_name}.py: {len(problems)} of {result.testsRun} tests failed:\n'
      + '\n'.join(f'{test}: {trace}' for test, trace in problems))
  return result.testsRun


def run_main(module, argv, program='train.py', record='train'):
  """Runs ``module.main`` as ``python train.py ARGV`` would.

  Returns ``(what the module's function `record` returned, the lines
  logged)``; ``main`` must call it once.
  """
  returned = []
  train = getattr(module, record)

  def recording_train(*args, **kwargs):
    returned.append(train(*args, **kwargs))
    return returned[-1]

  lines = _Lines()
  logger = logging.getLogger('absl')
  logger.addHandler(lines)
  setattr(module, record, recording_train)
  # Each run starts from the defaults of the program's flags (all flags
  # would reset absl's --verbosity too, to a level that hides INFO lines).
  for flag in FLAGS.get_flags_for_module(module):
    flag.unparse()
  try:
    app.run(module.main, argv=[program] + list(argv))
  except SystemExit as e:
    assert e.code in (None, 0), f'{program} {" ".join(argv)} exited with {e}'
  finally:
    setattr(module, record, train)
    logger.removeHandler(lines)
  assert len(returned) == 1, f'main called {record}() {len(returned)} times'
  return returned[0], lines.lines


def report(name, **facts):
  print('SMOKE-RESULT ' + json.dumps({'howto': name, **facts}, sort_keys=True),
        flush=True)
