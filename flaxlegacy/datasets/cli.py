"""``flaxlegacy data``: prepare datasets offline for unchanged tfds.load calls.

    flaxlegacy data mnist                 # real MNIST if prepared, else stand-in
    flaxlegacy data mnist --from DIR      # real MNIST from the four IDX files
    flaxlegacy data mnist --status        # what tfds.load('mnist') will read
    flaxlegacy data mnist --remove-standin
"""

import os
import sys

from flaxlegacy.datasets import idx
from flaxlegacy.datasets import paths

DATASETS = ('mnist',)


def add_arguments(parser):
  parser.add_argument('dataset', choices=DATASETS,
                      help='the dataset to prepare')
  parser.add_argument(
      '--from', dest='source', metavar='DIR',
      help='directory holding the four MNIST IDX files (train-images-idx3-'
      'ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, '
      't10k-labels-idx1-ubyte; .gz or raw). Without it, real MNIST already '
      'prepared is kept, and otherwise a stand-in built from scikit-learn\'s '
      'digits is written to flaxlegacy\'s own data dir.')
  parser.add_argument(
      '--data_dir', '--data-dir', dest='data_dir', metavar='DIR',
      help='where to write (default: TFDS\'s data dir, $TFDS_DATA_DIR or '
      '~/tensorflow_datasets, for real MNIST; flaxlegacy\'s stand-in dir, '
      f'${paths.ENV_STANDIN_DIR} or ~/.cache/flaxlegacy/standin_datasets, '
      'for the stand-in)')
  parser.add_argument('--overwrite', action='store_true',
                      help='replace a dataset already prepared there')
  parser.add_argument('--status', action='store_true',
                      help='only report what is prepared where')
  parser.add_argument('--remove-standin', '--remove_standin',
                      dest='remove_standin', action='store_true',
                      help='delete the stand-in')


def _out(msg):
  print(msg, flush=True)


def _err(msg):
  print(f'flaxlegacy data: error: {msg}', file=sys.stderr, flush=True)


def status():
  """``(real, standin)``: the PreparedMnist in each data dir, or None."""
  from flaxlegacy.datasets import mnist  # pylint: disable=g-import-not-at-top
  return (mnist.find_prepared(paths.tfds_data_dir()),
          mnist.find_prepared(paths.standin_data_dir()))


def _report_status():
  real, standin = status()
  _out(f'TFDS data dir: {paths.tfds_data_dir()}')
  _out(f'  {real.summary() if real else "no mnist prepared"}')
  _out(f'flaxlegacy stand-in data dir: {paths.standin_data_dir()}')
  _out(f'  {standin.summary() if standin else "no stand-in prepared"}')
  if real is not None:
    _out('tfds.load(\'mnist\') reads: the one in TFDS\'s data dir.')
  elif standin is not None:
    _out('tfds.load(\'mnist\') reads: the STAND-IN, in programs that use '
         'flaxlegacy (from flax import nn / optim, or `flaxlegacy run`); '
         f'elsewhere pass data_dir={standin.data_dir!r}.')
  else:
    _out('tfds.load(\'mnist\') reads: nothing prepared; it would download.')
  return 0


def _announce(prepared):
  verb = 'prepared' if prepared.created else 'already prepared'
  _out(f'flaxlegacy data: {verb} {prepared.summary()}')
  if prepared.standin:
    _out('  This is a STAND-IN, NOT MNIST: scikit-learn\'s 1797 8x8 '
         'handwritten digits resized to 28x28, split '
         f'{prepared.splits.get("train")} train / '
         f'{prepared.splits.get("test")} test. Programs that use flaxlegacy '
         'find it with an unchanged tfds.load(\'mnist\') and log that it is '
         'a stand-in. For real MNIST: flaxlegacy data mnist --from DIR')
  else:
    _out('  An unchanged tfds.load(\'mnist\') now reads it without network.')


def run(args):
  """Entry point of ``flaxlegacy data``; returns the exit status."""
  from flaxlegacy.datasets import mnist  # pylint: disable=g-import-not-at-top
  if args.status:
    return _report_status()
  if args.remove_standin:
    removed = mnist.remove_standin(args.data_dir)
    _out(f'flaxlegacy data: removed {removed.summary()}' if removed else
         'flaxlegacy data: no stand-in to remove')
    return 0
  if args.source is None and args.data_dir is None and not args.overwrite:
    real = mnist.find_prepared(paths.tfds_data_dir())
    if real is not None and not real.standin:
      _announce(real)
      return 0
  try:
    prepared = mnist.prepare_mnist(source_dir=args.source,
                                   data_dir=args.data_dir,
                                   overwrite=args.overwrite)
  except (FileNotFoundError, FileExistsError, idx.IdxError, ImportError) as e:
    _err(str(e))
    return 1
  _announce(prepared)
  if not prepared.standin:
    standin = mnist.find_prepared(paths.standin_data_dir())
    if standin is not None and os.path.abspath(prepared.data_dir) == \
        os.path.abspath(paths.tfds_data_dir()):
      _out(f'  The stand-in at {standin.dataset_dir} is no longer used '
           '(remove it with `flaxlegacy data mnist --remove-standin`).')
  return 0
