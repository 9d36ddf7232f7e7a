"""Offline preparation of the TFDS datasets legacy examples load.

``flaxlegacy data mnist`` (``flaxlegacy.datasets.cli``) and the API behind it:

* ``prepare_mnist(source_dir=None, data_dir=None, overwrite=False)``: writes
  TFDS's ``mnist`` from the four MNIST IDX files (into TFDS's data dir) or,
  without them, a clearly labelled stand-in built from scikit-learn's digits
  (into flaxlegacy's own data dir);
* ``find_prepared(data_dir)``, ``remove_standin()``;
* ``tfds_data_dir()``, ``standin_data_dir()``;
* ``tfds_hook``: in legacy processes, lets an unchanged ``tfds.load('mnist')``
  find the stand-in, announces it, and fails fast offline
  (``DatasetNotPreparedError``).

Importing this package does not import TensorFlow or TFDS.
"""

from flaxlegacy.datasets.mnist import find_prepared
from flaxlegacy.datasets.mnist import prepare_mnist
from flaxlegacy.datasets.mnist import PreparedMnist
from flaxlegacy.datasets.mnist import remove_standin
from flaxlegacy.datasets.paths import standin_data_dir
from flaxlegacy.datasets.paths import tfds_data_dir
from flaxlegacy.datasets.tfds_hook import DatasetNotPreparedError
