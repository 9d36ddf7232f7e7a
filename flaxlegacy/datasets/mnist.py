"""Prepares TFDS's ``mnist`` offline, for unchanged ``tfds.load('mnist')``.

TFDS's MNIST builder downloads four IDX files and writes them as the
``mnist`` dataset.  Here the same builder writes the same dataset from
arrays at hand: its features, version, citation and record layout are
TFDS's own (the builder class is TFDS's MNIST with only the source of the
examples replaced), so the unchanged ``tfds.load('mnist', ...)`` and
``tfds.builder('mnist').as_dataset(...)`` read it as if TFDS had downloaded
it.  Examples carry the same keys as TFDS's download path (their index in the
IDX file), so the written shards hold the same records in the same order.

Two sources:

* the real MNIST IDX files (``prepare_mnist(source_dir=DIR)``), written to
  TFDS's default data dir;
* the stand-in (``prepare_mnist()``, see ``standin``), written to
  flaxlegacy's own data dir with a description that says it is a stand-in.
"""

import contextlib
import dataclasses
import io
import os
import shutil
import tempfile

from flaxlegacy.datasets import idx
from flaxlegacy.datasets import paths
from flaxlegacy.datasets import standin as standin_lib

NAME = 'mnist'


@dataclasses.dataclass(frozen=True)
class PreparedMnist:
  """What is prepared where."""
  data_dir: str
  version: str
  standin: bool
  splits: dict
  created: bool = False  # False: it was already there

  @property
  def dataset_dir(self):
    return os.path.join(self.data_dir, NAME, self.version)

  def summary(self):
    kind = 'STAND-IN (not MNIST)' if self.standin else 'MNIST'
    sizes = ', '.join(f'{k} {v}' for k, v in sorted(self.splits.items()))
    return f'{kind} at {self.dataset_dir} ({sizes})'


def find_prepared(data_dir, version=None):
  """The ``PreparedMnist`` in ``data_dir`` (newest version), or None."""
  found = paths.prepared_versions(data_dir, NAME)
  if version is not None:
    found = {v: i for v, i in found.items() if v == str(version)}
  if not found:
    return None
  newest = max(found, key=lambda v: tuple(int(p) for p in v.split('.')
                                          if p.isdigit()))
  info = found[newest]
  return PreparedMnist(data_dir=os.path.expanduser(str(data_dir)),
                       version=newest, standin=paths.is_standin_info(info),
                       splits=paths.split_sizes(info))


def _builder_class(tfds):
  """TFDS's MNIST builder with the examples taken from arrays.

  Made once per process; ``skip_registration`` keeps it out of TFDS's
  registry, and ``name = 'mnist'`` makes it write where TFDS's builder reads.
  """
  cached = getattr(_builder_class, 'cls', None)
  if cached is not None:
    return cached
  mnist_cls = tfds.builder_cls(NAME)

  class ArrayMnist(mnist_cls, skip_registration=True):
    """``mnist`` written from in-memory arrays instead of downloads."""
    name = NAME
    # Tells flaxlegacy's offline guard (tfds_hook) that preparing this
    # builder needs no network.
    _flaxlegacy_local = True

    def __init__(self, *, splits, description=None, **kwargs):
      self._arrays = splits
      self._description = description
      super().__init__(**kwargs)

    def _info(self):
      info = super()._info()
      if self._description is None:
        return info
      return tfds.core.DatasetInfo(
          builder=self, description=self._description, features=info.features,
          supervised_keys=info.supervised_keys, homepage=info.homepage,
          citation=info.citation)

    def _split_generators(self, dl_manager):
      del dl_manager  # nothing to download
      return [tfds.core.SplitGenerator(name=split,
                                       gen_kwargs=dict(images=images,
                                                       labels=labels))
              for split, (images, labels) in self._arrays.items()]

    def _generate_examples(self, images, labels):
      # Keys are the index in the file, as in TFDS's own MNIST builder.
      for index, (image, label) in enumerate(zip(images, labels)):
        yield index, {'image': image, 'label': int(label)}

  _builder_class.cls = ArrayMnist
  return ArrayMnist


def write_tfds(splits, data_dir, description=None):
  """Writes ``{split: (images, labels)}`` as TFDS ``mnist`` in ``data_dir``."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  tfds.disable_progress_bar()
  builder = _builder_class(tfds)(splits=splits, description=description,
                                 data_dir=data_dir)
  # TFDS prints "Downloading and preparing dataset ..." to stdout; nothing
  # is downloaded here, so that line would mislead.
  with tempfile.TemporaryDirectory(prefix='flaxlegacy_dl_') as download_dir, \
      contextlib.redirect_stdout(io.StringIO()):
    builder.download_and_prepare(
        download_dir=download_dir,
        download_config=tfds.download.DownloadConfig(try_download_gcs=False))
  return str(builder.data_dir)


def _remove(prepared):
  shutil.rmtree(prepared.dataset_dir)
  parent = os.path.dirname(prepared.dataset_dir)
  if not os.listdir(parent):
    os.rmdir(parent)


def prepare_mnist(source_dir=None, data_dir=None, overwrite=False):
  """Prepares TFDS ``mnist`` so that ``tfds.load('mnist')`` needs no network.

  Args:
    source_dir: a directory with the four MNIST IDX files (gzip or raw).  If
      None, the stand-in built from scikit-learn's digits is written instead.
    data_dir: where to write; default TFDS's data dir for real MNIST and
      flaxlegacy's stand-in data dir (``paths.standin_data_dir()``) for the
      stand-in.
    overwrite: replace a dataset already prepared there.

  Returns:
    A ``PreparedMnist``; ``created`` is False if it was already there.
  """
  standin = source_dir is None
  if data_dir is None:
    data_dir = paths.standin_data_dir() if standin else paths.tfds_data_dir()
  data_dir = os.path.abspath(os.path.expanduser(str(data_dir)))
  if standin:
    splits = None
  else:
    files = idx.find_mnist_files(source_dir)
    # Read and validate everything before touching the data dir.
    splits = {
        'train': idx.read_mnist_split(files['train_images'],
                                      files['train_labels']),
        'test': idx.read_mnist_split(files['test_images'],
                                     files['test_labels']),
    }
  existing = find_prepared(data_dir)
  if existing is not None:
    if not overwrite and existing.standin == standin:
      return existing
    if not overwrite:
      kind = 'a stand-in' if existing.standin else 'real MNIST'
      raise FileExistsError(
          f'{data_dir} already holds {kind} ({existing.dataset_dir}); pass '
          'overwrite=True (`--overwrite`) to replace it')
    _remove(existing)
  if standin:
    splits = standin_lib.load()
  write_tfds(splits, data_dir,
             description=standin_lib.DESCRIPTION if standin else None)
  prepared = find_prepared(data_dir)
  # A hook applied earlier in this process looked before the data existed.
  from flaxlegacy.datasets import tfds_hook  # pylint: disable=g-import-not-at-top
  tfds_hook.refresh()
  return dataclasses.replace(prepared, created=True)


def remove_standin(data_dir=None):
  """Deletes the stand-in; returns the ``PreparedMnist`` removed, or None."""
  data_dir = data_dir or paths.standin_data_dir()
  existing = find_prepared(data_dir)
  if existing is None or not existing.standin:
    return None
  _remove(existing)
  return existing
