"""Legacy checkpoints: on-disk format, legacy semantics, errors, atomicity.

Two writers/readers are exercised side by side where legacy behaviour is
expected of both:

* ``flax.training.checkpoints`` of flax 0.12.8 itself, which the
  ``checkpoints`` policy of flaxlegacy switches to legacy msgpack files;
* ``flaxlegacy.training.checkpoints``, the opt-in legacy module (clear
  errors, durable writes; docs/checkpoints.md).

The reference checkpoint files were written by real legacy Flax 0.3.5.
"""

import copy
import os
import pickle
import warnings

import jax
import jax.numpy as jnp
import msgpack
import numpy as np
import pytest

import flaxlegacy

flaxlegacy.activate()

from flax import errors  # noqa: E402
from flax import serialization  # noqa: E402
from flax import struct  # noqa: E402
from flax import traverse_util  # noqa: E402
from flax.training import checkpoints as flax_checkpoints  # noqa: E402

from flaxlegacy import nn  # noqa: E402
from flaxlegacy import optim  # noqa: E402
from flaxlegacy.training import checkpoints as legacy_checkpoints  # noqa: E402
from tests import conformance  # noqa: E402

MODULES = {'flaxlegacy': legacy_checkpoints, 'flax': flax_checkpoints}


@pytest.fixture(params=sorted(MODULES))
def ckpt(request):
  """The checkpoints module under test (both serve legacy files)."""
  with warnings.catch_warnings():
    # flax 0.12.8 warns on every msgpack save (docs/checkpoints.md).
    warnings.filterwarnings('ignore', 'Flax Checkpointing will soon',
                            DeprecationWarning)
    yield MODULES[request.param]


def check_eq(xs, ys):
  assert (jax.tree_util.tree_structure(xs) ==
          jax.tree_util.tree_structure(ys)), (xs, ys)
  for x, y in zip(jax.tree_util.tree_leaves(xs), jax.tree_util.tree_leaves(ys)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def objects():
  return ({'a': np.array([0, 0, 0], np.int32), 'b': np.array([0, 0, 0],
                                                              np.int32)},
          {'a': np.array([1, 2, 3], np.int32), 'b': np.array([1, 1, 1],
                                                              np.int32)},
          {'a': np.array([4, 5, 6], np.int32), 'b': np.array([2, 2, 2],
                                                              np.int32)})


# --- natural sort (legacy test cases) ----------------------------------------


@pytest.mark.parametrize('expected', [
    ['file_1', 'file_2', 'file_10', 'file_11', 'file_21'],
    ['file_0.001', 'file_0.01', 'file_0.1', 'file_1'],
    ['file_-3.0', 'file_-2', 'file_-1', 'file_0.0'],
    ['file_1e1', 'file_1.0e2', 'file_1e3', 'file_1.0e4'],
    ['file_1', 'file_2', 'file_9', 'file_1.0e1', 'file_11'],
])
def test_natural_sort(expected):
  shuffled = list(reversed(expected))
  np.random.RandomState(0).shuffle(shuffled)
  assert legacy_checkpoints.natural_sort(shuffled) == expected


@pytest.mark.parametrize('path,expected', [
    ('./a/b/c', 'a/b/c'), ('/a//b/c', '/a/b/c'), ('/a/../b/c', '/b/c'),
    ('a/b/./c', 'a/b/c'), ('gs://a//b/c', 'gs://a/b/c')])
def test_safe_normpath(path, expected):
  assert legacy_checkpoints.safe_normpath(path) == expected


# --- legacy semantics (the legacy v0.3.6 checkpoints_test sequences) ----------


def test_save_restore_sequence(ckpt, tmp_path):
  obj0, obj1, obj2 = objects()
  check_eq(ckpt.restore_checkpoint(tmp_path, obj0, prefix='test_'), obj0)
  # A leftover temp file of a killed save is ignored.
  (tmp_path / 'test_tmp').write_bytes(b'')
  ckpt.save_checkpoint(tmp_path, obj1, 0, prefix='test_', keep=1)
  assert 'test_0' in os.listdir(tmp_path)
  check_eq(ckpt.restore_checkpoint(tmp_path, obj0, prefix='test_'), obj1)
  ckpt.save_checkpoint(tmp_path, obj1, 1, prefix='test_', keep=1)
  ckpt.save_checkpoint(tmp_path, obj2, 2, prefix='test_', keep=1)
  check_eq(ckpt.restore_checkpoint(tmp_path, obj0, prefix='test_'), obj2)
  ckpt.save_checkpoint(tmp_path, obj2, 3, prefix='test_', keep=2)
  ckpt.save_checkpoint(tmp_path, obj1, 4, prefix='test_', keep=2)
  assert sorted(n for n in os.listdir(tmp_path) if n != 'test_tmp') == [
      'test_3', 'test_4']
  check_eq(ckpt.restore_checkpoint(tmp_path, obj0, prefix='test_'), obj1)
  check_eq(ckpt.restore_checkpoint(tmp_path, obj0, step=3, prefix='test_'),
           obj2)
  check_eq(ckpt.restore_checkpoint(str(tmp_path / 'test_3'), obj0), obj2)
  # A file path that does not exist behaves like an empty directory.
  check_eq(ckpt.restore_checkpoint(str(tmp_path / 'test_not_there'), obj0),
           obj0)
  with pytest.raises(ValueError, match='Matching checkpoint not found: .*'
                     'test_5'):
    ckpt.restore_checkpoint(tmp_path, obj0, step=5, prefix='test_')


def test_overwrite(ckpt, tmp_path, monkeypatch):
  obj0 = {'a': np.array([0, 0, 0], np.int32)}
  obj = {'a': np.array([1, 2, 3], np.int32)}
  d = str(tmp_path)
  ckpt.save_checkpoint(d, obj0, 0, keep=1)
  with pytest.raises(errors.InvalidCheckpointError,
                     match=r'outdated checkpoint at step: "0"'):
    ckpt.save_checkpoint(d, obj, 0, keep=1)
  ckpt.save_checkpoint(d, obj, 0, keep=1, overwrite=True)
  check_eq(ckpt.restore_checkpoint(d, obj0), obj)
  ckpt.save_checkpoint(d, obj0, 2, keep=1, overwrite=True)
  check_eq(ckpt.restore_checkpoint(d, obj), obj0)
  with pytest.raises(errors.InvalidCheckpointError):
    ckpt.save_checkpoint(d, obj, 1, keep=1)
  ckpt.save_checkpoint(d, obj, 1, keep=1, overwrite=True)
  assert os.listdir(d) == ['checkpoint_1']
  check_eq(ckpt.restore_checkpoint(d, obj0), obj)
  monkeypatch.chdir(os.path.dirname(d))
  rel = './' + os.path.basename(d)
  ckpt.save_checkpoint(rel, obj, 3, keep=1)
  check_eq(ckpt.restore_checkpoint(rel, obj0), obj)
  ckpt.save_checkpoint(d + '//', obj, 4, keep=1)
  check_eq(ckpt.restore_checkpoint(d + '//', obj0), obj)


@pytest.mark.parametrize('keep_every_n_steps', [None, 7])
def test_keep(ckpt, tmp_path, keep_every_n_steps):
  obj = {'a': np.array([1, 2, 3], np.int32)}
  for step in range(17, 37, 5):
    ckpt.save_checkpoint(tmp_path, obj, step=step, keep=3,
                         keep_every_n_steps=keep_every_n_steps)
  expected = {22, 27, 32} | ({17} if keep_every_n_steps else set())
  assert {int(n.split('_')[1]) for n in os.listdir(tmp_path)} == expected
  for step in range(17, 37, 5):
    if step in expected:
      check_eq(ckpt.restore_checkpoint(tmp_path, None, step=step), obj)
    else:
      with pytest.raises(ValueError, match='Matching checkpoint not found'):
        ckpt.restore_checkpoint(tmp_path, None, step=step)


def test_float_steps(ckpt, tmp_path):
  obj0, obj1, obj2 = objects()
  (tmp_path / 'test_tmp').write_bytes(b'')
  ckpt.save_checkpoint(tmp_path, obj1, 0.0, prefix='test_', keep=1)
  assert 'test_0.0' in os.listdir(tmp_path)
  check_eq(ckpt.restore_checkpoint(tmp_path, obj0, prefix='test_'), obj1)
  ckpt.save_checkpoint(tmp_path, obj1, 2.0, prefix='test_', keep=1)
  # Since legacy v0.3.3 an out-of-order step raises (v0.2 wrote and pruned;
  # docs/checkpoints.md).
  with pytest.raises(errors.InvalidCheckpointError):
    ckpt.save_checkpoint(tmp_path, obj2, 1.0, prefix='test_', keep=1)
  ckpt.save_checkpoint(tmp_path, obj2, 3.0, prefix='test_', keep=2)
  assert {'test_3.0', 'test_2.0'} <= set(os.listdir(tmp_path))
  assert 'test_0.0' not in os.listdir(tmp_path)
  check_eq(ckpt.restore_checkpoint(tmp_path, obj0, prefix='test_'), obj2)
  check_eq(ckpt.restore_checkpoint(tmp_path, obj0, step=2.0, prefix='test_'),
           obj1)


def test_target_none(ckpt, tmp_path):
  obj0 = objects()[0]
  ckpt.save_checkpoint(tmp_path, obj0, 0)
  check_eq(ckpt.restore_checkpoint(tmp_path, target=None), obj0)
  pair = (np.array([0, 0, 0], np.int32), np.array([1, 1, 1], np.int32))
  ckpt.save_checkpoint(tmp_path, pair, 1)
  check_eq(ckpt.restore_checkpoint(tmp_path, target=None),
           {'0': pair[0], '1': pair[1]})


def test_step_zero_is_a_step(ckpt, tmp_path):
  # v0.3.4+ (and flax 0.12.8): step=0 names the file <prefix>0; v0.2-v0.3.3
  # read a falsy step as "latest" (docs/checkpoints.md).
  obj0, obj1, _ = objects()
  ckpt.save_checkpoint(tmp_path, obj0, 0, keep=2)
  ckpt.save_checkpoint(tmp_path, obj1, 1, keep=2)
  check_eq(ckpt.restore_checkpoint(tmp_path, None, step=0), obj0)
  check_eq(ckpt.restore_checkpoint(tmp_path, None), obj1)


# --- the file itself -------------------------------------------------------------


def small_optimizer(seed=0):
  """A legacy Momentum Optimizer over an nn.Model of one Dense layer."""
  _, params = nn.Dense.init_by_shape(jax.random.PRNGKey(seed),
                                     [((1, 3), jnp.float32)], features=2)
  model = nn.Model(nn.Dense.partial(features=2), params)
  return optim.Momentum(learning_rate=0.1, beta=0.9).create(model)


def test_file_is_legacy_msgpack(ckpt, tmp_path):
  optimizer = small_optimizer()
  path = ckpt.save_checkpoint(tmp_path, optimizer, 7)
  assert path == os.path.join(str(tmp_path), 'checkpoint_7')
  assert os.path.isfile(path)
  assert os.listdir(tmp_path) == ['checkpoint_7']
  with open(path, 'rb') as f:
    data = f.read()
  assert data == serialization.to_bytes(optimizer)
  raw = serialization.msgpack_restore(data)
  assert set(raw) == {'target', 'state'}
  assert set(raw['state']) == {'step', 'param_states'}
  assert set(raw['state']['param_states']['params']['kernel']) == {'momentum'}
  # Arrays are ext type 1 with a dtype *name* (legacy 0.3.0+ spelling).
  ext = msgpack.unpackb(data, raw=False, strict_map_key=False)
  kernel = ext['target']['params']['kernel']
  assert isinstance(kernel, msgpack.ExtType) and kernel.code == 1
  shape, dtype, _ = msgpack.unpackb(kernel.data, raw=True)
  assert (shape, dtype) == ([3, 2], b'float32')


def test_no_deprecation_warning_from_legacy_module(tmp_path):
  with warnings.catch_warnings():
    warnings.simplefilter('error')
    legacy_checkpoints.save_checkpoint(tmp_path, objects()[1], 1)
    legacy_checkpoints.restore_checkpoint(tmp_path, None)


def test_legacy_module_writes_msgpack_in_orbax_mode(tmp_path):
  import flax  # pylint: disable=g-import-not-at-top
  before = flax.config.flax_use_orbax_checkpointing
  flax.config.update('flax_use_orbax_checkpointing', True)
  try:
    path = legacy_checkpoints.save_checkpoint(tmp_path, objects()[1], 1)
  finally:
    flax.config.update('flax_use_orbax_checkpointing', before)
  assert os.path.isfile(path)


def test_stale_tmp_never_counts_as_checkpoint(tmp_path):
  obj0, obj1, obj2 = objects()
  legacy_checkpoints.save_checkpoint(tmp_path, obj1, 1, keep=1)
  (tmp_path / 'checkpoint_tmp').write_bytes(b'\x85partial')  # killed save
  legacy_checkpoints.save_checkpoint(tmp_path, obj2, 2, keep=1)
  # keep=1 kept the new checkpoint (not the stale temp file's place).
  assert sorted(os.listdir(tmp_path)) == ['checkpoint_2']
  check_eq(legacy_checkpoints.restore_checkpoint(tmp_path, obj0), obj2)


def test_unserializable_target_leaves_directory_unchanged(tmp_path):
  legacy_checkpoints.save_checkpoint(tmp_path, objects()[1], 1, keep=1)
  before = {n: (tmp_path / n).read_bytes() for n in os.listdir(tmp_path)}
  with pytest.raises(TypeError):
    legacy_checkpoints.save_checkpoint(tmp_path, {'a': object()}, 2, keep=1)
  assert {n: (tmp_path / n).read_bytes()
          for n in os.listdir(tmp_path)} == before


# --- bad files -------------------------------------------------------------------


def _bad_files(good):
  foreign_dict = msgpack.packb({'c': 1})
  other_shape = serialization.to_bytes({'a': np.zeros((2, 2), np.int32),
                                        'b': np.zeros((3,), np.int32)})
  return [
      ('empty', b'', 'the file is empty'),
      ('truncated_1', good[:1], 'the file is truncated'),
      ('truncated_half', good[:len(good) // 2], 'the file is truncated'),
      ('truncated_last', good[:-1], 'the file is truncated'),
      ('garbage', b'\x00garbage\xff' * 5,
       'not a Flax msgpack checkpoint: 44 bytes follow'),
      ('json', b'{"a": [1, 2, 3]}', 'not a Flax msgpack checkpoint'),
      ('invalid', b'\xc1', 'not a Flax msgpack checkpoint (invalid msgpack'),
      ('foreign_keys', foreign_dict, "it does not match the target "
       "(ValueError: The target dict keys and state dict keys do not match"),
      ('scalar', msgpack.packb(5), 'it does not match the target: at the top '
       'level the target has a dict of 2 entries, the file has int'),
      ('other_shape', other_shape, 'it does not match the target: at /a the '
       'file has shape (2, 2), the target (3,)'),
  ]


@pytest.mark.parametrize('case', range(10))
def test_bad_file_names_file_and_keeps_older(tmp_path, case):
  obj0, obj1, obj2 = objects()
  legacy_checkpoints.save_checkpoint(tmp_path, obj1, 1, keep=5)
  legacy_checkpoints.save_checkpoint(tmp_path, obj2, 2, keep=5)
  good = (tmp_path / 'checkpoint_2').read_bytes()
  name, data, reason = _bad_files(good)[case]
  bad = tmp_path / 'checkpoint_3'
  bad.write_bytes(data)
  before = sorted(os.listdir(tmp_path))
  with pytest.raises(legacy_checkpoints.CheckpointError) as info:
    legacy_checkpoints.restore_checkpoint(tmp_path, obj0)
  message = str(info.value)
  assert message.startswith(f'Cannot restore checkpoint {bad}: '), name
  assert reason in message, (name, message)
  assert ('older checkpoints in ' + str(tmp_path) + ' are untouched '
          '(checkpoint_1, checkpoint_2)') in message
  assert 'step=2' in message
  assert info.value.path == str(bad)
  assert isinstance(info.value, ValueError)
  # Nothing was removed, and the older checkpoints restore.
  assert sorted(os.listdir(tmp_path)) == before
  check_eq(legacy_checkpoints.restore_checkpoint(tmp_path, obj0, step=2),
           obj2)
  check_eq(legacy_checkpoints.restore_checkpoint(tmp_path, obj0, step=1),
           obj1)


def test_bad_file_raw_restore(tmp_path):
  (tmp_path / 'checkpoint_1').write_bytes(b'\x92\x01')  # list cut short
  with pytest.raises(legacy_checkpoints.CheckpointError,
                     match='checkpoint_1: the file is truncated'):
    legacy_checkpoints.restore_checkpoint(tmp_path, None)


def test_directory_is_not_a_checkpoint(tmp_path):
  (tmp_path / 'checkpoint_4').mkdir()
  with pytest.raises(legacy_checkpoints.CheckpointError,
                     match='checkpoint_4: it is a directory'):
    legacy_checkpoints.restore_checkpoint(tmp_path, objects()[0])


def test_orbax_directory_is_delegated(tmp_path):
  import flax  # pylint: disable=g-import-not-at-top
  obj0, obj1, _ = objects()
  before = flax.config.flax_use_orbax_checkpointing
  flax.config.update('flax_use_orbax_checkpointing', True)
  try:
    flax_checkpoints.save_checkpoint(tmp_path, obj1, 5)
  finally:
    flax.config.update('flax_use_orbax_checkpointing', before)
  assert os.path.isdir(tmp_path / 'checkpoint_5')
  check_eq(legacy_checkpoints.restore_checkpoint(tmp_path, obj0), obj1)


# --- old spellings ---------------------------------------------------------------


def _v02_array(arr, dtype_str):
  payload = msgpack.packb((arr.shape, dtype_str, arr.tobytes('C')),
                          use_bin_type=True)
  return msgpack.ExtType(1, payload)


def test_v02_dtype_strings(ckpt, tmp_path):
  # v0.1-v0.2.2 wrote arr.dtype.str ('<f4'); bfloat16 came out as '<V2'.
  f32 = np.arange(6, dtype=np.float32).reshape(2, 3)
  bf16 = np.asarray(jnp.arange(4, dtype=jnp.bfloat16))
  data = msgpack.packb({'w': _v02_array(f32, '<f4'),
                        'h': _v02_array(bf16, '<V2'), 'step': 3},
                       use_bin_type=True)
  (tmp_path / 'checkpoint_3').write_bytes(data)
  template = {'w': np.zeros((2, 3), np.float32),
              'h': jnp.zeros((4,), jnp.bfloat16), 'step': 0}
  restored = ckpt.restore_checkpoint(tmp_path, template)
  np.testing.assert_array_equal(restored['w'], f32)
  assert restored['w'].dtype == np.float32
  assert restored['step'] == 3
  if ckpt is legacy_checkpoints:
    assert restored['h'].dtype == jnp.bfloat16
    np.testing.assert_array_equal(restored['h'], bf16)
  else:
    # flax 0.12.8 gives the raw 2-byte void array (documented gap).
    assert restored['h'].dtype.kind == 'V'


# --- the reference checkpoints of real legacy Flax ----------------------------------


class ClassicCNN(nn.Module):
  """The generator's MNIST CNN (gen_mnist_cnn.py)."""

  def apply(self, x, num_classes=10):
    x = nn.Conv(x, features=32, kernel_size=(3, 3))
    x = nn.relu(x)
    x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
    x = nn.Conv(x, features=64, kernel_size=(3, 3))
    x = nn.relu(x)
    x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
    x = x.reshape((x.shape[0], -1))
    x = nn.Dense(x, features=256)
    x = nn.relu(x)
    x = nn.Dense(x, features=num_classes)
    return nn.log_softmax(x)


def mnist_template():
  _, params = ClassicCNN.init_by_shape(jax.random.PRNGKey(1),
                                       [((1, 28, 28, 1), jnp.float32)])
  model = nn.Model(ClassicCNN, params)
  return optim.Momentum(learning_rate=0.1, beta=0.9).create(model)


@pytest.fixture(scope='module')
def reference(shared):
  return conformance.reference_dir()


def npz(reference, name):
  return np.load(os.path.join(reference, name), allow_pickle=False)


def assert_state_dict_equals(tree, arrays, prefix):
  flat = traverse_util.flatten_dict(serialization.to_state_dict(tree),
                                    sep='/')
  expected = sorted(k[len(prefix):] for k in arrays.files
                    if k.startswith(prefix))
  assert sorted(flat) == expected
  for key, value in flat.items():
    ref = arrays[prefix + key]
    assert np.asarray(value).dtype == ref.dtype or np.ndim(ref) == 0, key
    np.testing.assert_array_equal(np.asarray(value), ref, err_msg=key)
  return len(flat)


def test_reference_mnist_restores_every_leaf(ckpt, reference):
  restored = ckpt.restore_checkpoint(
      os.path.join(reference, 'checkpoints', 'mnist_cnn'), mnist_template())
  assert isinstance(restored, optim.Optimizer)
  assert isinstance(restored.target, nn.Model)
  assert restored.target.module is ClassicCNN
  n = assert_state_dict_equals(restored, npz(reference, 'mnist_cnn.npz'),
                               'final/optimizer/')
  assert n == 17
  assert int(restored.state.step) == 20


def test_reference_mnist_training_continues(reference):
  """The reference's pmap phase continued from the checkpointed optimizer."""
  arrays = npz(reference, 'mnist_cnn.npz')
  restored = legacy_checkpoints.restore_checkpoint(
      os.path.join(reference, 'checkpoints', 'mnist_cnn'), mnist_template())
  images, labels = arrays['data/images'], arrays['data/labels']

  def p_step(optimizer, x, y):
    def loss_fn(model):
      logits = model(x)
      onehot = (y[..., None] == jnp.arange(10)).astype(jnp.float32)
      return -jnp.mean(jnp.sum(onehot * logits, axis=-1))
    optimizer, loss = optimizer.optimize(loss_fn)
    return optimizer, jax.lax.pmean(loss, 'batch')

  p_step = jax.pmap(p_step, axis_name='batch')
  replicated = restored.replicate(devices=jax.local_devices()[:1])
  names = [str(n) for n in arrays['model_leaf_names']]
  for k in range(3):
    replicated, loss = p_step(replicated, images[20 + k][None],
                              labels[20 + k][None])
    np.testing.assert_allclose(loss[0], arrays['pmap/loss'][k], rtol=1e-5)
    flat = traverse_util.flatten_dict(serialization.to_state_dict(
        jax.tree_util.tree_map(lambda x: x[0], replicated.target)), sep='/')
    l2 = [np.linalg.norm(np.asarray(flat[n], np.float64)) for n in names]
    np.testing.assert_allclose(l2, arrays[f'pmap/step_{k:02d}/params/l2'],
                               rtol=1e-5)
  final = replicated.unreplicate()
  assert int(final.state.step) == int(arrays['pmap/final_step'])
  np.testing.assert_allclose(final.target(images[0]),
                             arrays['pmap/final_logits_batch0'], rtol=1e-4,
                             atol=1e-5)


class ResBlock(nn.Module):
  """The generator's residual block (gen_resnet_stateful.py)."""

  def apply(self, x, filters, strides, train, bn_momentum, bn_epsilon):
    norm = nn.BatchNorm.partial(use_running_average=not train,
                                momentum=bn_momentum, epsilon=bn_epsilon)
    residual = x
    y = nn.Conv(x, filters, (3, 3), strides=(strides, strides), bias=False,
                name='conv1')
    y = norm(y, name='bn1')
    y = nn.relu(y)
    y = nn.Conv(y, filters, (3, 3), bias=False, name='conv2')
    y = norm(y, name='bn2', scale_init=nn.initializers.zeros)
    if residual.shape != y.shape:
      residual = nn.Conv(residual, filters, (1, 1),
                         strides=(strides, strides), bias=False, name='proj')
      residual = norm(residual, name='proj_bn')
    return nn.relu(residual + y)


class SmallResNet(nn.Module):
  """The generator's small ResNet."""

  def apply(self, x, stem=16, blocks=((16, 1), (32, 2)), num_classes=10,
            dropout=0.5, bn_momentum=0.9, bn_epsilon=1e-5, train=True):
    x = nn.Conv(x, stem, (3, 3), bias=False, name='stem_conv')
    x = nn.BatchNorm(x, use_running_average=not train, momentum=bn_momentum,
                     epsilon=bn_epsilon, name='stem_bn')
    x = nn.relu(x)
    for i, (filters, strides) in enumerate(blocks):
      x = ResBlock(x, filters, strides, train=train, bn_momentum=bn_momentum,
                   bn_epsilon=bn_epsilon, name=f'block{i}')
    x = jnp.mean(x, axis=(1, 2))
    x = nn.dropout(x, rate=dropout, deterministic=not train)
    x = nn.Dense(x, num_classes, name='head')
    return nn.log_softmax(x)


@struct.dataclass
class TrainState:
  step: int
  optimizer: optim.Optimizer
  model_state: nn.Collection


def resnet_template():
  with nn.stateful() as state:
    with nn.stochastic(jax.random.PRNGKey(3)):
      _, params = SmallResNet.init_by_shape(jax.random.PRNGKey(4),
                                            [((8, 16, 16, 3), jnp.float32)])
  optimizer = optim.Momentum(learning_rate=0.05, beta=0.9).create(
      nn.Model(SmallResNet, params))
  return TrainState(step=0, optimizer=optimizer, model_state=state)


def test_reference_resnet_train_state_restores_every_leaf(ckpt, reference):
  restored = ckpt.restore_checkpoint(
      os.path.join(reference, 'checkpoints', 'resnet_stateful'),
      resnet_template())
  assert isinstance(restored, TrainState)
  assert isinstance(restored.model_state, nn.Collection)
  assert restored.step == 5
  arrays = npz(reference, 'resnet_stateful.npz')
  assert assert_state_dict_equals(restored, arrays,
                                  'checkpoint/state_dict/') == 54


def test_reference_resnet_evaluates_and_trains_on(reference):
  arrays = npz(reference, 'resnet_stateful.npz')
  restored = legacy_checkpoints.restore_checkpoint(
      os.path.join(reference, 'checkpoints', 'resnet_stateful'),
      resnet_template())
  images, labels = arrays['data/images'], arrays['data/labels']
  eval_model = nn.Model(SmallResNet.partial(train=False),
                        restored.optimizer.target.params)
  with nn.stateful(restored.model_state, mutable=False):
    logits = eval_model(images[-1])
  np.testing.assert_allclose(logits, arrays['eval/logits'], rtol=1e-4,
                             atol=1e-5)

  @jax.jit
  def train_step(optimizer, state, x, y, rng):
    def loss_fn(model):
      with nn.stateful(state) as new_state:
        with nn.stochastic(rng):
          logits = model(x)
      onehot = (y[:, None] == jnp.arange(10)).astype(jnp.float32)
      return -jnp.mean(jnp.sum(onehot * logits, axis=-1)), new_state
    (loss, new_state), grad = jax.value_and_grad(loss_fn, has_aux=True)(
        optimizer.target)
    return optimizer.apply_gradient(grad), new_state, loss

  optimizer, state, loss = train_step(restored.optimizer,
                                      restored.model_state, images[0],
                                      labels[0], jax.random.PRNGKey(0))
  assert int(optimizer.state.step) == 6
  assert np.isfinite(loss)
  assert set(state.as_dict()) == set(restored.model_state.as_dict())


@pytest.mark.parametrize('program,rtol', [
    # mnist_cnn: the Conv_0 kernel momentum drifts to 4e-4 of its scale
    # after 20 steps (tests/test_conformance.py, 'mnist_cnn-drift').
    ('mnist_cnn', 1e-3), ('resnet_stateful', 1e-4)])
def test_generated_checkpoint_files_match_legacy(generated, program, rtol):
  """The generators' save_checkpoint, run under flaxlegacy, writes legacy
  single-file checkpoints whose contents match the legacy ones."""
  cand = generated(program)
  for entry in conformance.manifest()['files']:
    if entry['program'] == program:
      assert os.path.isfile(os.path.join(cand, entry['path'])), entry['path']
  count, failures = conformance.compare_files(program, cand, rtol=rtol)
  assert count == 1
  assert not failures, failures[:10]


# --- no pickle on any load path ---------------------------------------------------


def test_no_pickle_on_load(reference, tmp_path, monkeypatch):
  def refuse(*args, **kwargs):
    raise AssertionError('pickle used on a checkpoint load path')

  for name in ('load', 'loads', 'Unpickler'):
    monkeypatch.setattr(pickle, name, refuse)
  original_load = np.load

  def np_load(*args, **kwargs):
    assert not kwargs.get('allow_pickle'), 'np.load(allow_pickle=True)'
    return original_load(*args, **kwargs)
  monkeypatch.setattr(np, 'load', np_load)
  for module in MODULES.values():
    module.restore_checkpoint(
        os.path.join(reference, 'checkpoints', 'mnist_cnn'), mnist_template())
    module.restore_checkpoint(
        os.path.join(reference, 'checkpoints', 'resnet_stateful'), None)
  # An object array in a checkpoint is refused, not unpickled.
  payload = msgpack.packb(((2,), '|O', b'\x00' * 16), use_bin_type=True)
  (tmp_path / 'checkpoint_1').write_bytes(
      msgpack.packb({'a': msgpack.ExtType(1, payload)}))
  with pytest.raises(legacy_checkpoints.CheckpointError,
                     match='checkpoint_1: the file is corrupted'):
    legacy_checkpoints.restore_checkpoint(tmp_path, None)


def test_no_pickle_in_sources():
  root = os.path.join(conformance.REPO, 'flaxlegacy')
  for sub in ('training', 'migrate'):
    for dirpath, _, files in os.walk(os.path.join(root, sub)):
      for name in files:
        if name.endswith('.py'):
          with open(os.path.join(dirpath, name)) as f:
            text = f.read()
          assert 'import pickle' not in text and 'allow_pickle=True' not in text


def test_deepcopy_of_template_is_not_needed(tmp_path):
  # restore_checkpoint leaves the template untouched.
  template = small_optimizer(seed=1)
  before = copy.deepcopy(serialization.to_state_dict(template))
  legacy_checkpoints.save_checkpoint(tmp_path, small_optimizer(seed=2), 1)
  restored = legacy_checkpoints.restore_checkpoint(tmp_path, template)
  check_eq(serialization.to_state_dict(template), before)
  check_eq(serialization.to_state_dict(restored),
           serialization.to_state_dict(small_optimizer(seed=2)))
