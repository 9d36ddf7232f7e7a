"""flaxlegacy.datasets: IDX files, the MNIST stand-in, TFDS preparation, the
tfds hook (stand-in lookup, announcement, offline guard) and `flaxlegacy data`.

The TFDS parts run in this process (one TFDS import) on tiny synthetic IDX
files and on the real stand-in; nothing is downloaded.
"""

import gzip
import io
import logging
import os
import time

import numpy as np
import pytest

from flaxlegacy.datasets import idx
from flaxlegacy.datasets import mnist
from flaxlegacy.datasets import paths
from flaxlegacy.datasets import standin
from flaxlegacy.datasets import tfds_hook

# --- IDX --------------------------------------------------------------------


def _fake_mnist(n, seed):
  rng = np.random.RandomState(seed)
  images = rng.randint(0, 256, size=(n, 28, 28)).astype(np.uint8)
  labels = rng.randint(0, 10, size=n).astype(np.uint8)
  return images, labels


def _write_mnist_dir(directory, n_train=40, n_test=12, gz=True, dotted=False):
  os.makedirs(directory, exist_ok=True)
  arrays = {'train': _fake_mnist(n_train, 1), 'test': _fake_mnist(n_test, 2)}
  for role, names in idx.MNIST_FILES.items():
    split, kind = role.split('_')
    name = names[1] if dotted else names[0]
    data = arrays[split][0 if kind == 'images' else 1]
    idx.write_idx(os.path.join(directory, name + ('.gz' if gz else '')), data)
  return arrays


@pytest.mark.parametrize('compress', [True, False])
@pytest.mark.parametrize('array', [
    np.arange(24, dtype=np.uint8).reshape(2, 3, 4),
    np.array([3, 1, 4], np.int32),
    np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2),
])
def test_idx_round_trip(tmp_path, array, compress):
  path = tmp_path / 'a.idx'
  idx.write_idx(path, array, compress=compress)
  with open(path, 'rb') as f:
    assert (f.read(2) == b'\x1f\x8b') == compress
  back = idx.read_idx(path)
  assert back.dtype == array.dtype and back.shape == array.shape
  np.testing.assert_array_equal(back, array)


def test_idx_header_layout(tmp_path):
  # Big-endian header: 0, 0, type 0x08, ndim, then one uint32 per dimension.
  path = tmp_path / 'x'
  idx.write_idx(path, np.zeros((2, 28, 28), np.uint8), compress=False)
  raw = open(path, 'rb').read()
  assert raw[:16] == bytes([0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 28, 0, 0, 0, 28])
  assert len(raw) == 16 + 2 * 28 * 28


@pytest.mark.parametrize('payload, message', [
    (b'', 'not an IDX file (bad magic number <empty>)'),
    (b'\x01\x02\x08\x01', 'not an IDX file (bad magic number 01020801)'),
    (b'\x00\x00\x42\x01\x00\x00\x00\x01\x00', 'unknown IDX type code 0x42'),
    (b'\x00\x00\x08\x02\x00\x00\x00\x01', 'truncated IDX header'),
    (b'\x00\x00\x08\x01\x00\x00\x00\x03\x01\x02',
     'IDX header says shape (3,) (11 bytes) but the file holds 10 bytes'),
])
def test_idx_bad_files(tmp_path, payload, message):
  path = tmp_path / 'bad'
  path.write_bytes(payload)
  with pytest.raises(idx.IdxError) as e:
    idx.read_idx(path)
  assert str(e.value) == f'{path}: {message}'


def test_idx_broken_gzip(tmp_path):
  path = tmp_path / 'bad.gz'
  path.write_bytes(gzip.compress(b'\x00\x00\x08\x01\x00\x00\x00\x05abcde')[:-6])
  with pytest.raises(idx.IdxError, match=r'bad\.gz: cannot read IDX data'):
    idx.read_idx(path)


@pytest.mark.parametrize('gz, dotted', [(True, False), (False, False),
                                        (False, True)])
def test_find_and_read_mnist_files(tmp_path, gz, dotted):
  arrays = _write_mnist_dir(tmp_path, gz=gz, dotted=dotted)
  files = idx.find_mnist_files(tmp_path)
  assert sorted(files) == sorted(idx.MNIST_FILES)
  images, labels = idx.read_mnist_split(files['train_images'],
                                        files['train_labels'])
  assert images.shape == (40, 28, 28, 1) and labels.dtype == np.int64
  np.testing.assert_array_equal(images[..., 0], arrays['train'][0])
  np.testing.assert_array_equal(labels, arrays['train'][1])


def test_find_mnist_files_names_what_is_missing(tmp_path):
  _write_mnist_dir(tmp_path)
  os.remove(tmp_path / 't10k-labels-idx1-ubyte.gz')
  os.remove(tmp_path / 'train-images-idx3-ubyte.gz')
  with pytest.raises(FileNotFoundError) as e:
    idx.find_mnist_files(tmp_path)
  assert str(e.value).startswith(
      f"MNIST IDX files missing in '{tmp_path}': train-images-idx3-ubyte[.gz], "
      't10k-labels-idx1-ubyte[.gz] (expected the four files')
  with pytest.raises(FileNotFoundError,
                     match="MNIST source directory '/no/such' does not exist"):
    idx.find_mnist_files('/no/such')


@pytest.mark.parametrize('images, labels, message', [
    (np.zeros((3, 28, 27), np.uint8), np.zeros(3, np.uint8),
     'expected uint8 images of shape [N, 28, 28], got uint8 (3, 28, 27)'),
    (np.zeros((3, 28, 28), np.uint8), np.zeros((3, 1), np.uint8),
     'expected uint8 labels of shape [N], got uint8 (3, 1)'),
    (np.zeros((3, 28, 28), np.uint8), np.zeros(2, np.uint8),
     'holds 3 images but'),
    (np.zeros((2, 28, 28), np.uint8), np.array([1, 10], np.uint8),
     'labels must be digits 0-9, found 10'),
])
def test_read_mnist_split_validates(tmp_path, images, labels, message):
  idx.write_idx(tmp_path / 'i', images)
  idx.write_idx(tmp_path / 'l', labels)
  with pytest.raises(idx.IdxError) as e:
    idx.read_mnist_split(tmp_path / 'i', tmp_path / 'l')
  assert message in str(e.value)


# --- stand-in ---------------------------------------------------------------


def test_interpolation_keeps_constants_and_mass():
  m = standin._interpolation_matrix(20, 8)  # pylint: disable=protected-access
  np.testing.assert_allclose(m.sum(1), 1.0)
  flat = standin.resize(np.full((1, 8, 8), 0.25), 20)
  np.testing.assert_allclose(flat, 0.25)
  # A bright left column stays on the left.
  img = np.zeros((1, 8, 8))
  img[0, :, 0] = 1
  out = standin.resize(img, 20)
  # Half-pixel centres: output column j samples input x = (j + .5) * .4 - .5.
  np.testing.assert_allclose(out[0, :, :4], [[1.0, 0.9, 0.5, 0.1]] * 20)
  assert out[0, :, 4:].max() == 0


def test_center_by_mass_centres_and_clips():
  box = np.zeros((2, 20, 20))
  box[0, 0, 0] = 1.0  # mass in a corner: clipped to stay inside the field
  box[1, 9:11, 9:11] = 1.0  # mass at the box centre: box centred in field
  out = standin.center_by_mass(box, 28)
  assert out.shape == (2, 28, 28)
  assert out[0, 8, 8] == 1.0  # corner moved as far as the field allows
  ys, xs = np.nonzero(out[1])
  assert ys.mean() == pytest.approx(13.5) and xs.mean() == pytest.approx(13.5)


@pytest.fixture(scope='module')
def standin_data():
  return standin.load()


def test_standin_layout_and_split(standin_data):
  (xtr, ytr), (xte, yte) = standin_data['train'], standin_data['test']
  assert xtr.shape == (1437, 28, 28, 1) and xte.shape == (360, 28, 28, 1)
  assert xtr.dtype == np.uint8 and ytr.dtype == np.int64
  assert xtr.max() == 255 and xtr.min() == 0
  assert set(ytr) == set(yte) == set(range(10))
  # As in MNIST, each digit's centre of mass sits at the field's centre.
  grid = np.arange(28)
  mass = xtr[..., 0].astype(np.float64)
  cy = (mass.sum(2) * grid).sum(1) / mass.sum((1, 2))
  cx = (mass.sum(1) * grid).sum(1) / mass.sum((1, 2))
  assert np.mean((abs(cy - 13.5) <= 1) & (abs(cx - 13.5) <= 1)) > 0.99
  train_idx, test_idx = standin.split_indices()
  assert len(set(train_idx) | set(test_idx)) == 1797
  assert not set(train_idx) & set(test_idx)
  # Frozen split: RandomState(0) is stable across NumPy versions.
  assert list(test_idx[:5]) == sorted(
      np.random.RandomState(0).permutation(1797)[:360])[:5]


def test_standin_matches_sklearn_digits(standin_data):
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  digits = datasets.load_digits()
  train_idx, _ = standin.split_indices()
  np.testing.assert_array_equal(standin_data['train'][1],
                                digits.target[train_idx])
  np.testing.assert_array_equal(standin_data['train'][0],
                                standin.to_mnist_layout(
                                    digits.images[train_idx]))
  assert standin.DESCRIPTION.startswith(paths.STANDIN_MARK)


# --- paths ------------------------------------------------------------------


def test_data_dirs_follow_environment(monkeypatch, tmp_path):
  monkeypatch.setenv('HOME', str(tmp_path))
  for var in ('TFDS_DATA_DIR', 'XDG_CACHE_HOME', paths.ENV_STANDIN_DIR):
    monkeypatch.delenv(var, raising=False)
  assert paths.tfds_data_dir() == str(tmp_path / 'tensorflow_datasets')
  assert paths.standin_data_dir() == str(
      tmp_path / '.cache' / 'flaxlegacy' / 'standin_datasets')
  monkeypatch.setenv('XDG_CACHE_HOME', '/xdg')
  assert paths.standin_data_dir() == '/xdg/flaxlegacy/standin_datasets'
  monkeypatch.setenv(paths.ENV_STANDIN_DIR, '/mine')
  monkeypatch.setenv('TFDS_DATA_DIR', '/tfds')
  assert (paths.standin_data_dir(), paths.tfds_data_dir()) == ('/mine',
                                                               '/tfds')


# --- offline guard units (no TFDS) ------------------------------------------


@pytest.mark.parametrize('value, probe, expected', [
    ('1', None, 'FLAXLEGACY_OFFLINE=1'),
    ('true', None, 'FLAXLEGACY_OFFLINE=true'),
    ('0', 'x does not answer', None),
    ('', None, None),
    ('', 'x does not answer', 'no network: x does not answer'),
])
def test_offline_reason(monkeypatch, value, probe, expected):
  for var in tfds_hook._PROXY_VARS:  # pylint: disable=protected-access
    monkeypatch.delenv(var, raising=False)
  monkeypatch.setenv('FLAXLEGACY_OFFLINE', value)
  monkeypatch.setitem(tfds_hook._state, 'probe', None)  # pylint: disable=protected-access
  monkeypatch.setattr(tfds_hook, '_probe', lambda host: probe)
  assert tfds_hook.offline_reason() == expected


def test_offline_reason_trusts_a_proxy(monkeypatch):
  monkeypatch.delenv('FLAXLEGACY_OFFLINE', raising=False)
  monkeypatch.setenv('https_proxy', 'http://proxy:3128')
  monkeypatch.setattr(tfds_hook, '_probe', lambda host: pytest.fail('probed'))
  assert tfds_hook.offline_reason() is None


def test_probe_is_bounded():
  start = time.time()
  reason = tfds_hook._probe('flaxlegacy-test.invalid', timeout=1.0)  # pylint: disable=protected-access
  assert time.time() - start < 3.0
  assert reason.startswith('flaxlegacy-test.invalid does not answer')


# --- TFDS -------------------------------------------------------------------


@pytest.fixture(scope='module')
def tfds():
  tfds = pytest.importorskip('tensorflow_datasets')
  tfds.disable_progress_bar()
  return tfds


@pytest.fixture
def tfds_env(tfds, monkeypatch, tmp_path):
  """Empty TFDS and stand-in data dirs; the hook applied fresh."""
  from tensorflow_datasets.core import constants  # pylint: disable=g-import-not-at-top
  from tensorflow_datasets.core.utils import file_utils  # pylint: disable=g-import-not-at-top
  tfds_dir, standin_dir = tmp_path / 'tfds', tmp_path / 'standin'
  monkeypatch.setenv('TFDS_DATA_DIR', str(tfds_dir))
  monkeypatch.setattr(constants, 'DATA_DIR', str(tfds_dir))
  monkeypatch.setenv(paths.ENV_STANDIN_DIR, str(standin_dir))
  monkeypatch.setenv('FLAXLEGACY_OFFLINE', '1')
  tfds_hook.remove(tfds)
  file_utils.clear_registered_data_dirs()
  yield {'tfds': str(tfds_dir), 'standin': str(standin_dir)}
  tfds_hook.remove(tfds)
  file_utils.clear_registered_data_dirs()


def _load_all(tfds, split, **kwargs):
  data = tfds.as_numpy(tfds.load('mnist', split=split, batch_size=-1,
                                 **kwargs))
  return data['image'], data['label']


def _sorted_examples(images, labels):
  """Examples as a canonical list (TFDS shuffles records when writing)."""
  return sorted((int(l), im.tobytes()) for im, l in zip(images, labels))


def test_prepare_real_mnist_from_idx(tfds, tfds_env, tmp_path):
  arrays = _write_mnist_dir(tmp_path / 'src', gz=False)
  prepared = mnist.prepare_mnist(source_dir=tmp_path / 'src')
  assert prepared.created and not prepared.standin
  assert prepared.data_dir == tfds_env['tfds']
  assert prepared.splits == {'train': 40, 'test': 12}
  # The unchanged legacy call reads it (no data_dir, offline guard on).
  tfds_hook.apply(tfds)
  images, labels = _load_all(tfds, 'test')
  assert images.shape == (12, 28, 28, 1)
  assert _sorted_examples(images, labels) == _sorted_examples(
      arrays['test'][0][..., None], arrays['test'][1])
  builder = tfds.builder('mnist')
  assert builder.info.description == 'The MNIST database of handwritten digits.'
  # Same records as TFDS's own download path: keys are file indices, so the
  # shuffled order is a function of the data alone -- preparing twice gives
  # byte-identical shards.
  again = mnist.prepare_mnist(source_dir=tmp_path / 'src',
                              data_dir=tmp_path / 'again')
  shard = 'mnist-test.tfrecord-00000-of-00001'
  assert (open(os.path.join(prepared.dataset_dir, shard), 'rb').read() ==
          open(os.path.join(again.dataset_dir, shard), 'rb').read())
  # Already there: nothing is rewritten.
  assert not mnist.prepare_mnist(source_dir=tmp_path / 'src').created


def test_prepare_refuses_to_mix_kinds(tfds, tfds_env, tmp_path):
  _write_mnist_dir(tmp_path / 'src')
  mnist.prepare_mnist(source_dir=tmp_path / 'src',
                      data_dir=tfds_env['standin'])
  with pytest.raises(FileExistsError, match='already holds real MNIST'):
    mnist.prepare_mnist(data_dir=tfds_env['standin'])


def test_bad_source_touches_nothing(tfds_env, tmp_path):
  _write_mnist_dir(tmp_path / 'src')
  (tmp_path / 'src' / 't10k-labels-idx1-ubyte.gz').write_bytes(b'junk')
  with pytest.raises(idx.IdxError, match='not an IDX file'):
    mnist.prepare_mnist(source_dir=tmp_path / 'src')
  assert not os.path.exists(tfds_env['tfds'])


@pytest.fixture(scope='module')
def standin_dir(tfds, tmp_path_factory):
  """The real stand-in, written once for the module."""
  directory = str(tmp_path_factory.mktemp('standin'))
  mnist.prepare_mnist(data_dir=directory)
  return directory


def test_standin_found_announced_and_labelled(tfds, tfds_env, standin_dir,
                                              standin_data, monkeypatch,
                                              caplog):
  monkeypatch.setenv(paths.ENV_STANDIN_DIR, standin_dir)
  tfds_hook.apply(tfds)
  assert tfds_hook._state['registered'] == standin_dir  # pylint: disable=protected-access
  with caplog.at_level(logging.WARNING, logger='flaxlegacy'):
    ds, info = tfds.load('mnist', split='train', batch_size=-1,
                         with_info=True)
  data = tfds.as_numpy(ds)
  assert _sorted_examples(data['image'], data['label']) == _sorted_examples(
      *standin_data['train'])
  assert info.description == standin.DESCRIPTION
  assert info.splits['test'].num_examples == 360
  warnings = [r.getMessage() for r in caplog.records if r.name == 'flaxlegacy']
  assert len(warnings) == 1
  assert 'is the STAND-IN at' in warnings[0] and 'NOT MNIST' in warnings[0]
  assert '`flaxlegacy data mnist --from DIR`' in warnings[0]
  # The legacy v0.2 path (builder + download_and_prepare) reads it too.
  builder = tfds.builder('mnist')
  builder.download_and_prepare()
  test = tfds.as_numpy(builder.as_dataset(split='test', batch_size=-1))
  assert test['image'].shape == (360, 28, 28, 1)


def test_real_mnist_in_tfds_dir_wins_over_standin(tfds, tfds_env, standin_dir,
                                                  monkeypatch, tmp_path):
  monkeypatch.setenv(paths.ENV_STANDIN_DIR, standin_dir)
  _write_mnist_dir(tmp_path / 'src')
  mnist.prepare_mnist(source_dir=tmp_path / 'src')
  tfds_hook.apply(tfds)
  assert tfds_hook._state['registered'] is None  # pylint: disable=protected-access
  images, _ = _load_all(tfds, 'train')
  assert images.shape == (40, 28, 28, 1)


def test_offline_missing_dataset_fails_fast(tfds, tfds_env):
  tfds_hook.apply(tfds)
  start = time.time()
  with pytest.raises(tfds_hook.DatasetNotPreparedError) as e:
    tfds.load('mnist', split='train', batch_size=-1)
  assert time.time() - start < 10
  message = str(e.value)
  assert message.startswith(
      "tfds dataset 'mnist' (version 3.0.1) is not prepared in "
      f"{tfds_env['tfds']} and this process is offline "
      '(FLAXLEGACY_OFFLINE=1)')
  assert 'Run `flaxlegacy data mnist` first' in message
  # Other datasets get advice that fits them.
  with pytest.raises(tfds_hook.DatasetNotPreparedError,
                     match=r"Prepare 'fashion_mnist' on a machine with "
                     r'network \(`tfds build fashion_mnist`\)'):
    tfds.builder('fashion_mnist').download_and_prepare()


def test_offline_guard_off_lets_tfds_try(tfds, tfds_env, monkeypatch):
  monkeypatch.setenv('FLAXLEGACY_OFFLINE', '0')
  tfds_hook.apply(tfds)
  builder = tfds.builder('mnist')
  # No network access is attempted here: only the guard's decision.
  tfds_hook.check_can_prepare(builder)


def test_hook_is_off_with_env(tfds, tfds_env, monkeypatch):
  monkeypatch.setenv('FLAXLEGACY_TFDS', 'off')
  tfds_hook.install()
  assert not tfds_hook._state['applied']  # pylint: disable=protected-access
  assert not getattr(tfds.core.DatasetBuilder.download_and_prepare,
                     '_flaxlegacy', False)


# --- `flaxlegacy data` -------------------------------------------------------


def _cli(argv, capsys):
  from flaxlegacy import cli  # pylint: disable=g-import-not-at-top
  status = cli.main(['data'] + argv)
  out = capsys.readouterr()
  return status, out.out, out.err


def test_cli_from_dir_and_status(tfds, tfds_env, tmp_path, capsys):
  _write_mnist_dir(tmp_path / 'src', gz=True)
  status, out, _ = _cli(['mnist', '--from', str(tmp_path / 'src')], capsys)
  assert status == 0
  dataset_dir = os.path.join(tfds_env['tfds'], 'mnist', '3.0.1')
  assert out.splitlines()[0] == (
      f'flaxlegacy data: prepared MNIST at {dataset_dir} (test 12, train 40)')
  # Without --from, real MNIST already prepared is kept (no stand-in).
  status, out, _ = _cli(['mnist'], capsys)
  assert status == 0 and 'already prepared MNIST at' in out
  assert not os.path.exists(tfds_env['standin'])
  status, out, _ = _cli(['mnist', '--status'], capsys)
  assert f'MNIST at {dataset_dir}' in out
  assert "tfds.load('mnist') reads: the one in TFDS's data dir." in out


def test_cli_missing_files(tfds_env, tmp_path, capsys):
  status, out, err = _cli(['mnist', '--from', str(tmp_path)], capsys)
  assert status == 1 and not out
  assert err.startswith('flaxlegacy data: error: MNIST IDX files missing in ')


def test_cli_standin_and_removal(tfds, tfds_env, capsys):
  status, out, _ = _cli(['mnist'], capsys)
  assert status == 0
  standin_path = os.path.join(tfds_env['standin'], 'mnist', '3.0.1')
  assert out.splitlines()[0] == (
      f'flaxlegacy data: prepared STAND-IN (not MNIST) at {standin_path} '
      '(test 360, train 1437)')
  assert 'This is a STAND-IN, NOT MNIST' in out
  assert not os.path.exists(tfds_env['tfds'])
  status, out, _ = _cli(['mnist', '--remove-standin'], capsys)
  assert status == 0 and out.startswith('flaxlegacy data: removed STAND-IN')
  assert not os.path.exists(standin_path)


def test_activation_installs_the_hook(tfds, tfds_env):
  from flaxlegacy import _activate  # pylint: disable=g-import-not-at-top
  assert not tfds_hook._state['applied']  # pylint: disable=protected-access
  _activate._install_dataset_hook()  # pylint: disable=protected-access
  assert tfds_hook._state['applied']  # pylint: disable=protected-access
  assert getattr(tfds.core.DatasetBuilder.as_dataset, '_flaxlegacy', False)
