"""Where prepared datasets live, and what is prepared there (no TFDS import).

Two data dirs matter:

* TFDS's default data dir (``$TFDS_DATA_DIR``, else ``~/tensorflow_datasets``):
  real MNIST prepared from the IDX files goes there, exactly where a
  downloading ``tfds.load('mnist')`` would have put it.
* flaxlegacy's stand-in data dir (``$FLAXLEGACY_STANDIN_DIR``, else
  ``$XDG_CACHE_HOME/flaxlegacy/standin_datasets``, else
  ``~/.cache/flaxlegacy/standin_datasets``): the MNIST stand-in goes there and
  nowhere else, so it can never be mistaken for (or overwrite) the real thing.
  The tfds hook (``tfds_hook``) makes it visible to ``tfds.load`` only while
  no real MNIST is prepared in TFDS's data dir.

These helpers only look at files, so the start-up path stays cheap.
"""

import glob
import json
import os

ENV_STANDIN_DIR = 'FLAXLEGACY_STANDIN_DIR'
STANDIN_MARK = 'STAND-IN FOR MNIST'


def tfds_data_dir():
  """TFDS's default data dir, as TFDS computes it."""
  return os.environ.get('TFDS_DATA_DIR') or os.path.join(
      os.path.expanduser('~'), 'tensorflow_datasets')


def standin_data_dir():
  """The data dir of flaxlegacy's stand-in datasets."""
  explicit = os.environ.get(ENV_STANDIN_DIR)
  if explicit:
    return os.path.expanduser(explicit)
  cache = os.environ.get('XDG_CACHE_HOME') or os.path.join(
      os.path.expanduser('~'), '.cache')
  return os.path.join(cache, 'flaxlegacy', 'standin_datasets')


def prepared_versions(data_dir, name='mnist'):
  """``{version: dataset_info dict}`` of ``name`` prepared in ``data_dir``."""
  found = {}
  pattern = os.path.join(glob.escape(os.path.expanduser(str(data_dir))), name,
                         '*', 'dataset_info.json')
  for info_path in sorted(glob.glob(pattern)):
    version = os.path.basename(os.path.dirname(info_path))
    try:
      with open(info_path) as f:
        found[version] = json.load(f)
    except (OSError, ValueError):
      continue  # an unreadable dir is not a prepared dataset
  return found


def is_standin_info(info):
  """Whether a dataset_info dict describes flaxlegacy's MNIST stand-in."""
  return str(info.get('description', '')).startswith(STANDIN_MARK)


def split_sizes(info):
  """``{split: num_examples}`` from a dataset_info dict."""
  sizes = {}
  for split in info.get('splits', []):
    lengths = split.get('shardLengths') or []
    sizes[split.get('name')] = sum(int(n) for n in lengths)
  return sizes
