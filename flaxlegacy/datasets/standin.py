"""A stand-in for MNIST built from the handwritten digits scikit-learn ships.

When the real MNIST files are not at hand (no network, no copy), the MNIST
example can still run end to end on real handwritten digits: the 1797 8x8
digits of ``sklearn.datasets.load_digits()`` (the UCI "optdigits" test set,
13 writers, grey levels 0-16), brought into MNIST's layout the way MNIST's
own digits were (scaled into a 20x20 box, placed in a 28x28 field with their
centre of mass at the centre, grey levels 0-255).

The split is fixed: ``numpy.random.RandomState(0).permutation(1797)``; the
first ``NUM_TEST`` indices are the test split, the rest the train split.
RandomState's stream is frozen by NumPy's compatibility policy, so the split
is the same on every machine.

This is a stand-in, not MNIST: accuracies on it are not MNIST accuracies.
"""

import numpy as np

NUM_EXAMPLES = 1797
NUM_TEST = 360
NUM_TRAIN = NUM_EXAMPLES - NUM_TEST
SPLIT_SEED = 0
IMAGE_SIZE = 28
BOX_SIZE = 20  # MNIST scaled each digit into a 20x20 box

DESCRIPTION = (
    'STAND-IN FOR MNIST, NOT MNIST. Written by `flaxlegacy data mnist` '
    'because the real MNIST files were not available: the 1797 8x8 '
    'handwritten digits of scikit-learn (sklearn.datasets.load_digits, the '
    'UCI optdigits test set) resized to 20x20 and centred by centre of mass '
    'in a 28x28 field like MNIST. Split: numpy.random.RandomState('
    f'{SPLIT_SEED}).permutation({NUM_EXAMPLES}), first {NUM_TEST} -> test, '
    f'other {NUM_TRAIN} -> train. Accuracies on it are not comparable with '
    'MNIST results. For the real dataset run `flaxlegacy data mnist --from '
    'DIR` with the four MNIST IDX files.')


def _interpolation_matrix(n_out, n_in):
  """Linear interpolation weights ``[n_out, n_in]`` with half-pixel centres."""
  # Output pixel i covers [i, i+1) * n_in / n_out; sample at its centre.
  x = (np.arange(n_out) + 0.5) * n_in / n_out - 0.5
  x = np.clip(x, 0, n_in - 1)
  lo = np.floor(x).astype(int)
  hi = np.minimum(lo + 1, n_in - 1)
  frac = x - lo
  m = np.zeros((n_out, n_in))
  m[np.arange(n_out), lo] += 1 - frac
  m[np.arange(n_out), hi] += frac
  return m


def resize(images, size):
  """Bilinear resize of ``[N, h, w]`` images to ``[N, size, size]``."""
  rows = _interpolation_matrix(size, images.shape[1])
  cols = _interpolation_matrix(size, images.shape[2])
  return np.einsum('ij,njk,lk->nil', rows, images, cols)


def center_by_mass(box, size):
  """Places each ``[N, b, b]`` image in a ``size`` field, mass-centred."""
  n, b, _ = box.shape
  out = np.zeros((n, size, size), box.dtype)
  grid = np.arange(b)
  for k in range(n):
    img = box[k]
    total = img.sum()
    if total > 0:
      cy = (img.sum(1) * grid).sum() / total
      cx = (img.sum(0) * grid).sum() / total
    else:
      cy = cx = (b - 1) / 2
    # Top-left corner that puts the centre of mass at the field's centre,
    # kept inside the field.
    top = int(np.clip(np.round((size - 1) / 2 - cy), 0, size - b))
    left = int(np.clip(np.round((size - 1) / 2 - cx), 0, size - b))
    out[k, top:top + b, left:left + b] = img
  return out


def to_mnist_layout(digits8x8):
  """8x8 images with grey levels 0-16 -> uint8 ``[N, 28, 28, 1]`` images."""
  digits8x8 = np.asarray(digits8x8, np.float64)
  box = resize(digits8x8 / 16.0, BOX_SIZE)
  field = center_by_mass(np.clip(box, 0.0, 1.0), IMAGE_SIZE)
  return np.round(field * 255.0).astype(np.uint8)[..., None]


def split_indices():
  """``(train_indices, test_indices)`` into ``load_digits()``."""
  order = np.random.RandomState(SPLIT_SEED).permutation(NUM_EXAMPLES)
  return np.sort(order[NUM_TEST:]), np.sort(order[:NUM_TEST])


def load():
  """``{'train': (images, labels), 'test': (images, labels)}`` of the stand-in.

  Images are uint8 ``[N, 28, 28, 1]``, labels int64 ``[N]``.
  """
  try:
    from sklearn import datasets  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(
        'The MNIST stand-in is built from scikit-learn\'s digits; install '
        'it with `pip install "flaxlegacy[examples]"` (or scikit-learn), or '
        'give the real MNIST files: `flaxlegacy data mnist --from DIR`.'
    ) from e
  digits = datasets.load_digits()
  if digits.images.shape != (NUM_EXAMPLES, 8, 8):
    raise ValueError('scikit-learn\'s load_digits() returned images of shape '
                     f'{digits.images.shape}, expected ({NUM_EXAMPLES}, 8, 8)')
  images = to_mnist_layout(digits.images)
  labels = np.asarray(digits.target, np.int64)
  train, test = split_indices()
  return {'train': (images[train], labels[train]),
          'test': (images[test], labels[test])}
