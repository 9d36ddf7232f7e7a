"""Legacy ``flax.training.checkpoints``: single-file msgpack checkpoints.

Same signatures as legacy Flax v0.3.6 and the same semantics (the newest
legacy ones, which the reference checkpoints were written with): a
checkpoint is one msgpack file ``<ckpt_dir>/<prefix><step>`` holding
``flax.serialization.to_bytes(target)``; saving a step lower than or equal
to the newest one raises ``flax.errors.InvalidCheckpointError`` unless
``overwrite=True``; ``keep`` keeps the newest files in natural-sort order;
``restore_checkpoint`` loads the naturally last file or ``step``.

Today's ``flax.training.checkpoints`` (with the ``checkpoints`` policy of
flaxlegacy on) writes the same files; this module differs where a legacy
program is better served than by it (docs/checkpoints.md has the table):

* it always writes msgpack files, whatever ``flax_use_orbax_checkpointing``
  says, and emits no DeprecationWarning;
* writes are durable as well as atomic: the bytes are serialized before the
  directory is touched, written to ``<prefix>tmp``, fsync-ed, renamed over
  the final name, and the directory is fsync-ed;
* a stale ``<prefix>tmp`` left by a killed process is never counted as a
  checkpoint (neither by ``keep`` nor by the step-order check);
* a file that cannot be restored (empty, truncated, corrupted, not a Flax
  checkpoint, or not matching the target's structure or shapes) raises
  ``CheckpointError`` naming the file, the reason and the older checkpoints
  that remain restorable; nothing is deleted on a failed restore;
* a bfloat16 array written by Flax v0.1-v0.2.2 (dtype string ``'<V2'``) is
  restored as bfloat16 when the target leaf is bfloat16.

Nothing on the load path uses pickle: msgpack plus ``numpy.frombuffer``.
"""

import os
import shutil

from absl import logging
from flax import errors
from flax import io as flax_io
from flax import serialization
from flax.training import checkpoints as _flax_checkpoints
import jax.numpy as jnp
import msgpack
import numpy as np

# Unchanged since legacy (the legacy test cases pass on them): used as they
# are, so that there is one natural sort and one pre-linen renaming.
natural_sort = _flax_checkpoints.natural_sort
safe_normpath = _flax_checkpoints.safe_normpath
convert_pre_linen = _flax_checkpoints.convert_pre_linen
SIGNED_FLOAT_RE = _flax_checkpoints.SIGNED_FLOAT_RE
UNSIGNED_FLOAT_RE = _flax_checkpoints.UNSIGNED_FLOAT_RE
MODULE_NUM_RE = _flax_checkpoints.MODULE_NUM_RE
SCHEME_RE = _flax_checkpoints.SCHEME_RE

InvalidCheckpointError = errors.InvalidCheckpointError

_TMP = 'tmp'


class CheckpointError(ValueError):
  """A checkpoint file that cannot be restored.

  Attributes:
    path: the file.
    reason: what is wrong with it.
    older: the checkpoint files of the same directory and prefix that sort
      before this one, which this failure leaves untouched (oldest first).
  """

  def __init__(self, path, reason, older=(), prefix='checkpoint_'):
    self.path = path
    self.reason = reason
    self.older = tuple(older)
    message = f'Cannot restore checkpoint {path}: {reason}.'
    if self.older:
      names = [os.path.basename(p) for p in self.older]
      message += (
          f' The older checkpoints in {os.path.dirname(path)} are untouched '
          f'({", ".join(names)}); restore the newest of them with '
          f'restore_checkpoint(ckpt_dir, target, '
          f'step={names[-1][len(prefix):]}).')
    super().__init__(message)


# --- files -------------------------------------------------------------------


def _checkpoint_path(ckpt_dir, step, prefix):
  return os.path.join(ckpt_dir, f'{prefix}{step}')


def _is_remote(path):
  return bool(SCHEME_RE.match(path).group('scheme'))


# Local paths use the os module directly (flax.io would route them through
# TensorFlow's gfile whenever TensorFlow is installed); paths with a scheme
# (gs://...) go through flax.io.


def _exists(path):
  return flax_io.exists(path) if _is_remote(path) else os.path.exists(path)


def _isdir(path):
  return flax_io.isdir(path) if _is_remote(path) else os.path.isdir(path)


def _listdir(path):
  try:
    return flax_io.listdir(path) if _is_remote(path) else os.listdir(path)
  except (FileNotFoundError, NotADirectoryError, flax_io.NotFoundError):
    return []


def _makedirs(path):
  if _is_remote(path):
    flax_io.makedirs(path)
  elif path:
    os.makedirs(path, exist_ok=True)


def _open(path, mode):
  return flax_io.GFile(path, mode) if _is_remote(path) else open(path, mode)


def _checkpoint_files(ckpt_dir, prefix):
  """Checkpoint paths in ``ckpt_dir`` (natural order), without the temp file.

  Legacy globbed ``<prefix>*``; the temp file is left out here because a
  stale one (a killed save) is not a checkpoint, neither for ``keep`` nor for
  the step-order check.
  """
  tmp_name = f'{prefix}{_TMP}'
  names = [n for n in _listdir(ckpt_dir)
           if n.startswith(prefix) and n != tmp_name]
  return natural_sort([os.path.join(ckpt_dir, n) for n in names])


def latest_checkpoint(ckpt_dir, prefix='checkpoint_'):
  """The path of the naturally last checkpoint in ``ckpt_dir``, or None."""
  files = _checkpoint_files(safe_normpath(os.fspath(ckpt_dir)), prefix)
  return files[-1] if files else None


def _fsync_dir(path):
  try:
    fd = os.open(path, os.O_RDONLY)
  except OSError:  # not supported on this platform / file system
    return
  try:
    os.fsync(fd)
  except OSError:
    pass
  finally:
    os.close(fd)


def _write_atomically(tmp_path, path, data, overwrite):
  """Writes ``data`` to ``path`` so that no reader ever sees a partial file."""
  if _is_remote(path):
    # Object stores: the same temp + rename protocol, through flax.io.
    with flax_io.GFile(tmp_path, 'wb') as f:
      f.write(data)
    flax_io.rename(tmp_path, path, overwrite=overwrite)
    return
  with open(tmp_path, 'wb') as f:
    f.write(data)
    f.flush()
    os.fsync(f.fileno())
  if not overwrite and os.path.exists(path):
    raise errors.AlreadyExistsError(path)
  os.replace(tmp_path, path)
  _fsync_dir(os.path.dirname(path) or '.')


def _is_orbax(path):
  return _flax_checkpoints._is_orbax_checkpoint(path)  # pylint: disable=protected-access


def _remove(path):
  if _is_remote(path):
    if flax_io.isdir(path):
      flax_io.rmtree(path)
    else:
      flax_io.remove(path)
  elif os.path.isdir(path):
    if _is_orbax(path):
      shutil.rmtree(path)
    else:
      logging.warning('Not removing directory %s: not a checkpoint.', path)
  else:
    os.remove(path)


# --- save ----------------------------------------------------------------------


def save_checkpoint(ckpt_dir, target, step, prefix='checkpoint_', keep=1,
                    overwrite=False, keep_every_n_steps=None):
  """Saves ``target`` as the checkpoint file ``<ckpt_dir>/<prefix><step>``.

  Args:
    ckpt_dir: directory (str or path-like) to store checkpoint files in.
    target: serializable object (an Optimizer, a flax.struct TrainState, a
      dict of arrays ...).
    step: int or float: training step or another metric; part of the name.
    prefix: checkpoint file name prefix.
    keep: number of checkpoint files to keep (the naturally last ones).
    overwrite: allow a step lower than or equal to the newest existing one;
      the checkpoints after it are then removed.
    keep_every_n_steps: also keep one checkpoint every n steps.

  Returns:
    The path of the written file.

  Raises:
    flax.errors.InvalidCheckpointError: ``step`` is not after the newest
      existing checkpoint and ``overwrite`` is False (nothing is written).
  """
  ckpt_dir = safe_normpath(os.fspath(ckpt_dir))
  logging.info('Saving checkpoint at step: %s', step)
  tmp_path = _checkpoint_path(ckpt_dir, _TMP, prefix)
  ckpt_path = _checkpoint_path(ckpt_dir, step, prefix)
  _makedirs(os.path.dirname(ckpt_path))

  files = _checkpoint_files(ckpt_dir, prefix)
  if ckpt_path in files:
    if not overwrite:
      raise InvalidCheckpointError(ckpt_path, step)
  else:
    files = natural_sort(files + [ckpt_path])
    if files[-1] != ckpt_path and not overwrite:
      raise InvalidCheckpointError(ckpt_path, step)

  # Serialize first: an unserializable target leaves the directory as it was.
  data = serialization.to_bytes(target)
  _write_atomically(tmp_path, ckpt_path, data, overwrite)
  logging.info('Saved checkpoint at %s', ckpt_path)

  if overwrite:
    index = files.index(ckpt_path) + 1
    for path in files[index:]:
      logging.info('Removing checkpoint at %s', path)
      _remove(path)
    files = files[:index]

  # Keep the last `keep` files (and one every `keep_every_n_steps`).
  last_kept = -float('inf')
  if len(files) > keep:
    for path in files[:-keep]:
      if keep_every_n_steps:
        step_number = _flax_checkpoints._checkpoint_path_step(path)  # pylint: disable=protected-access
        if step_number and step_number - last_kept >= keep_every_n_steps:
          last_kept = step_number
          continue
      logging.info('Removing checkpoint at %s', path)
      _remove(path)
  return ckpt_path


# --- restore -------------------------------------------------------------------


def _decode(data):
  """msgpack bytes -> state dict; raises ValueError(reason) on bad bytes."""
  if not data:
    raise ValueError('the file is empty (an interrupted write or a '
                     'truncated copy)')
  try:
    return serialization.msgpack_restore(data)
  except msgpack.ExtraData as e:
    raise ValueError(
        f'it is not a Flax msgpack checkpoint: {len(e.extra)} bytes follow '
        'the first msgpack object (corrupted, or another file format)'
    ) from None
  except (msgpack.FormatError, msgpack.StackError) as e:
    raise ValueError('it is not a Flax msgpack checkpoint (invalid msgpack '
                     f'data: {type(e).__name__}{": " + str(e) if str(e) else ""})'
                     ) from None
  except ValueError as e:
    # msgpack says "incomplete input", or (for a container or a binary whose
    # declared length exceeds the bytes left) "N exceeds max_..._len(M)".
    if 'incomplete input' in str(e) or 'exceeds max_' in str(e):
      raise ValueError(
          f'the file is truncated ({len(data)} bytes end inside the msgpack '
          'data): its write was interrupted or it was copied partially'
      ) from None
    raise ValueError(f'the file is corrupted ({e})') from None
  except (TypeError, AttributeError, OverflowError, MemoryError) as e:
    raise ValueError(f'the file is corrupted ({type(e).__name__}: {e})'
                     ) from None


def _is_array(x):
  return isinstance(x, (np.ndarray, np.generic)) or hasattr(x, 'aval')


def _check_against(template, state, path):
  """Checks shapes of ``state`` against the state dict of the target.

  Legacy restored whatever the file held; a file of another model then gave
  wrong shapes far from the cause.  Also reinterprets v0.1-v0.2.2 bfloat16
  arrays (dtype string '<V2') as bfloat16.  Mutates ``state`` in place.
  """
  if isinstance(template, dict):
    if not isinstance(state, dict):
      raise ValueError(
          f'at {path or "the top level"} the target has a dict of '
          f'{len(template)} entries, the file has {type(state).__name__}')
    for key, value in template.items():
      if key in state:
        fixed = _check_against(value, state[key], f'{path}/{key}')
        if fixed is not state[key]:
          state[key] = fixed
    return state
  if _is_array(template) and np.ndim(template) > 0:
    if isinstance(state, dict):
      raise ValueError(f'at {path} the target has an array of shape '
                       f'{tuple(np.shape(template))}, the file has a dict')
    if not _is_array(state):
      raise ValueError(f'at {path} the target has an array of shape '
                       f'{tuple(np.shape(template))}, the file has '
                       f'{type(state).__name__} {state!r:.40}')
    if tuple(np.shape(state)) != tuple(np.shape(template)):
      raise ValueError(f'at {path} the file has shape {tuple(state.shape)}, '
                       f'the target {tuple(np.shape(template))}')
    if (isinstance(state, np.ndarray) and state.dtype.kind == 'V' and
        state.dtype.itemsize == 2 and template.dtype == jnp.bfloat16):
      return state.view(jnp.bfloat16)
  return state


def _restore_bytes(path, data, target, older, prefix):
  try:
    state = _decode(data)
  except ValueError as e:
    raise CheckpointError(path, str(e), older, prefix) from None
  if target is None:
    return state
  try:
    _check_against(serialization.to_state_dict(target), state, '')
  except ValueError as e:
    raise CheckpointError(path, f'it does not match the target: {e}', older,
                          prefix) from None
  try:
    return serialization.from_state_dict(target, state)
  except (ValueError, KeyError, TypeError, AttributeError, IndexError) as e:
    raise CheckpointError(
        path, f'it does not match the target ({type(e).__name__}: {e})',
        older, prefix) from e


def restore_checkpoint(ckpt_dir, target, step=None, prefix='checkpoint_',
                       parallel=True):
  """Restores the last checkpoint (or ``step``) into ``target``.

  Args:
    ckpt_dir: a directory of checkpoints, or one checkpoint file.
    target: the object to restore into (its structure and shapes are used),
      or None to return the raw state dict.
    step: the step to load (its file must exist), or None for the naturally
      last file.
    prefix: checkpoint file name prefix.
    parallel: accepted for compatibility; files are read in one pass.

  Returns:
    The restored object; ``target`` unchanged if ``step`` is None and there
    is no checkpoint (or ``ckpt_dir`` does not exist).

  Raises:
    ValueError: ``step`` was given and its file does not exist.
    CheckpointError: the file cannot be restored (names file and reason).
  """
  del parallel  # A single sequential read; legacy's threads only sped it up.
  ckpt_dir = safe_normpath(os.fspath(ckpt_dir))
  if step is not None:
    ckpt_path = _checkpoint_path(ckpt_dir, step, prefix)
    if not _exists(ckpt_path):
      raise ValueError(f'Matching checkpoint not found: {ckpt_path}')
    base_dir = ckpt_dir
  else:
    if not _exists(ckpt_dir):
      logging.info('Found no checkpoint at %s', ckpt_dir)
      return target
    if _isdir(ckpt_dir) and not _is_orbax(ckpt_dir):
      ckpt_path = latest_checkpoint(ckpt_dir, prefix)
      if not ckpt_path:
        logging.info('Found no checkpoint files in %s', ckpt_dir)
        return target
      base_dir = ckpt_dir
    else:
      ckpt_path = ckpt_dir
      base_dir = os.path.dirname(ckpt_dir)

  if _isdir(ckpt_path):
    if _is_orbax(ckpt_path):
      # Written by today's Flax/Orbax: its reader is the one that knows it.
      return _flax_checkpoints.restore_checkpoint(ckpt_path, target)
    raise CheckpointError(ckpt_path, 'it is a directory, not a checkpoint '
                          'file', prefix=prefix)

  others = _checkpoint_files(base_dir, prefix)
  older = others[:others.index(ckpt_path)] if ckpt_path in others else others
  logging.info('Restoring checkpoint from %s', ckpt_path)
  with _open(ckpt_path, 'rb') as f:
    data = f.read()
  return _restore_bytes(ckpt_path, data, target, older, prefix)
