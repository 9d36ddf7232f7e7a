"""The IDX file format of the MNIST distribution (gzip-compressed or raw).

An IDX file is a big-endian header -- two zero bytes, a type code, the
number of dimensions, one 32-bit size per dimension -- followed by the array.
MNIST ships four of them: images are ``uint8 [N, 28, 28]`` (magic 2051),
labels ``uint8 [N]`` (magic 2049).  Files may be gzip-compressed (as
downloaded) or raw (as unpacked by many tools).

Pure NumPy; reading validates everything the TFDS builder relies on, so bad
files fail here with a message naming the file, not later inside TFDS.
"""

import gzip
import os

import numpy as np

_DTYPES = {
    0x08: np.dtype('>u1'),
    0x09: np.dtype('>i1'),
    0x0B: np.dtype('>i2'),
    0x0C: np.dtype('>i4'),
    0x0D: np.dtype('>f4'),
    0x0E: np.dtype('>f8'),
}
_CODES = {dtype.newbyteorder('='): code for code, dtype in _DTYPES.items()}
_GZIP_MAGIC = b'\x1f\x8b'

# The four MNIST files, by role, with the names they go by: the official
# names, and the dotted spelling several mirrors use.
MNIST_FILES = {
    'train_images': ('train-images-idx3-ubyte', 'train-images.idx3-ubyte'),
    'train_labels': ('train-labels-idx1-ubyte', 'train-labels.idx1-ubyte'),
    'test_images': ('t10k-images-idx3-ubyte', 't10k-images.idx3-ubyte'),
    'test_labels': ('t10k-labels-idx1-ubyte', 't10k-labels.idx1-ubyte'),
}


class IdxError(ValueError):
  """A file that is not a valid (MNIST) IDX file."""


def _open(path):
  with open(path, 'rb') as f:
    head = f.read(2)
  return gzip.open(path, 'rb') if head == _GZIP_MAGIC else open(path, 'rb')


def read_idx(path):
  """Reads an IDX file (gzip or raw) into a NumPy array of native byte order."""
  try:
    with _open(path) as f:
      data = f.read()
  except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
    raise IdxError(f'{path}: cannot read IDX data ({e})') from None
  if len(data) < 4 or data[0] != 0 or data[1] != 0:
    raise IdxError(f'{path}: not an IDX file (bad magic number '
                   f'{data[:4].hex() or "<empty>"})')
  code, ndim = data[2], data[3]
  if code not in _DTYPES:
    raise IdxError(f'{path}: unknown IDX type code 0x{code:02x}')
  header = 4 + 4 * ndim
  if len(data) < header:
    raise IdxError(f'{path}: truncated IDX header')
  shape = tuple(int(d) for d in np.frombuffer(data, '>u4', ndim, offset=4))
  dtype = _DTYPES[code]
  expected = header + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
  if len(data) != expected:
    raise IdxError(f'{path}: IDX header says shape {shape} ({expected} bytes) '
                   f'but the file holds {len(data)} bytes')
  array = np.frombuffer(data, dtype, offset=header).reshape(shape)
  return array.astype(dtype.newbyteorder('='))


def write_idx(path, array, compress=None):
  """Writes ``array`` as an IDX file; gzip if ``compress`` (default: .gz)."""
  array = np.asarray(array)
  code = _CODES.get(array.dtype)
  if code is None:
    raise IdxError(f'IDX cannot store dtype {array.dtype}')
  header = bytes([0, 0, code, array.ndim]) + np.asarray(
      array.shape, '>u4').tobytes()
  payload = header + array.astype(_DTYPES[code]).tobytes()
  if compress is None:
    compress = str(path).endswith('.gz')
  opener = gzip.open if compress else open
  with opener(path, 'wb') as f:
    f.write(payload)


def find_mnist_files(directory):
  """Paths of the four MNIST IDX files in ``directory`` (gz or raw).

  Raises:
    FileNotFoundError: naming the directory and every missing file.
  """
  directory = os.fspath(directory)
  if not os.path.isdir(directory):
    raise FileNotFoundError(f'MNIST source directory {directory!r} does not '
                            'exist')
  found, missing = {}, []
  for role, names in MNIST_FILES.items():
    for name in names:
      candidates = [os.path.join(directory, name + ext)
                    for ext in ('.gz', '')]
      path = next((p for p in candidates if os.path.isfile(p)), None)
      if path:
        found[role] = path
        break
    else:
      missing.append(names[0] + '[.gz]')
  if missing:
    raise FileNotFoundError(
        f'MNIST IDX files missing in {directory!r}: {", ".join(missing)} '
        '(expected the four files of http://yann.lecun.com/exdb/mnist/, '
        'gzip-compressed or raw)')
  return found


def read_mnist_split(images_path, labels_path):
  """``(images uint8 [N, 28, 28, 1], labels int64 [N])`` from two IDX files."""
  images = read_idx(images_path)
  labels = read_idx(labels_path)
  if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != (
      28, 28):
    raise IdxError(f'{images_path}: expected uint8 images of shape '
                   f'[N, 28, 28], got {images.dtype} {images.shape}')
  if labels.dtype != np.uint8 or labels.ndim != 1:
    raise IdxError(f'{labels_path}: expected uint8 labels of shape [N], got '
                   f'{labels.dtype} {labels.shape}')
  if len(images) != len(labels):
    raise IdxError(f'{images_path} holds {len(images)} images but '
                   f'{labels_path} holds {len(labels)} labels')
  if labels.size and labels.max() > 9:
    raise IdxError(f'{labels_path}: labels must be digits 0-9, found '
                   f'{int(labels.max())}')
  return images[..., None], labels.astype(np.int64)
