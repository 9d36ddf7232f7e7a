"""What flaxlegacy adds to ``tensorflow_datasets`` in legacy processes.

Installed by activation (the first ``from flax import nn`` / ``optim``, or
``flaxlegacy run``); it waits for ``tensorflow_datasets`` to be imported and
then does three small things, so that unchanged 2020 programs that call
``tfds.load('mnist')`` or ``tfds.builder('mnist').download_and_prepare()``
work on a machine without network:

1. Stand-in lookup.  If flaxlegacy's stand-in MNIST is prepared (see
   ``paths.standin_data_dir()``) and no ``mnist`` is prepared in TFDS's own
   data dir, the stand-in's data dir is registered with TFDS's public
   ``tfds.core.add_data_dir``, so ``tfds.load('mnist')`` without ``data_dir``
   finds it.  Real MNIST in TFDS's data dir always wins; an explicit
   ``data_dir=`` is left alone (TFDS then looks only there).
2. Stand-in announcement.  Reading a stand-in logs a warning that it is not
   MNIST, and the builder's ``info.description`` says so, whatever program
   reads it: the stand-in never passes for MNIST silently.
3. Offline guard.  When a dataset is not prepared and this process is
   offline, ``download_and_prepare`` fails at once with a message naming
   ``flaxlegacy data mnist``, instead of TFDS retrying downloads for minutes.
   Offline means ``FLAXLEGACY_OFFLINE=1``, or (when the variable is unset and
   no proxy is configured) that TFDS's download host does not answer within
   a few seconds.  ``FLAXLEGACY_OFFLINE=0`` lets TFDS try regardless.

``FLAXLEGACY_TFDS=off`` turns all of this off.
"""

import functools
import importlib.abc
import logging
import os
import socket
import sys
import threading

from flaxlegacy.datasets import paths

logger = logging.getLogger('flaxlegacy')

ENV_OFFLINE = 'FLAXLEGACY_OFFLINE'
ENV_HOOK = 'FLAXLEGACY_TFDS'
_TRUE = ('1', 'true', 'yes', 'on')
_FALSE = ('0', 'false', 'no', 'off')
PROBE_HOST = 'storage.googleapis.com'  # TFDS's download and GCS host
PROBE_TIMEOUT_S = 3.0
_PROXY_VARS = ('https_proxy', 'HTTPS_PROXY', 'http_proxy', 'HTTP_PROXY',
               'all_proxy', 'ALL_PROXY')

_lock = threading.RLock()
_state = {'applied': False, 'registered': None, 'announced': set(),
          'probe': None}


class DatasetNotPreparedError(FileNotFoundError):
  """A TFDS dataset that is not prepared, in a process that is offline."""


def enabled():
  return os.environ.get(ENV_HOOK, 'on').strip().lower() not in _FALSE


# --- 1. stand-in lookup -----------------------------------------------------


def _tfds_default_dir(tfds):
  # TFDS reads TFDS_DATA_DIR once, at import; use the value it uses.
  from tensorflow_datasets.core import constants  # pylint: disable=g-import-not-at-top
  return str(constants.DATA_DIR)


def register_standin(tfds):
  """Registers the stand-in data dir if it is the only ``mnist`` around."""
  if paths.prepared_versions(_tfds_default_dir(tfds)):
    return None  # real (or user-provided) mnist in TFDS's data dir wins
  standin_dir = paths.standin_data_dir()
  if not paths.prepared_versions(standin_dir):
    return None
  tfds.core.add_data_dir(standin_dir)
  _state['registered'] = standin_dir
  return standin_dir


def refresh():
  """Re-runs the lookup after a dataset was prepared in this process."""
  tfds = sys.modules.get('tensorflow_datasets')
  if tfds is not None and _state['applied']:
    register_standin(tfds)


# --- 2. stand-in announcement ----------------------------------------------


def _standin_info(builder):
  if getattr(builder, 'name', None) != 'mnist':
    return None
  data_dir = os.path.dirname(os.path.dirname(str(builder.data_path)))
  info = paths.prepared_versions(data_dir).get(str(builder.version))
  return info if info and paths.is_standin_info(info) else None


def announce_standin(builder):
  """Warns (once per location) when ``builder`` reads the MNIST stand-in."""
  info = _standin_info(builder)
  if info is None:
    return False
  try:
    # The code's description ("The MNIST database ...") otherwise wins over
    # the one written with the data; the stand-in must say what it is.
    builder.info.as_proto.description = info['description']
  except Exception:  # pylint: disable=broad-except
    pass
  where = str(builder.data_path)
  if where not in _state['announced']:
    _state['announced'].add(where)
    sizes = ', '.join(f'{k} {v}' for k, v in
                      sorted(paths.split_sizes(info).items()))
    logger.warning(
        'flaxlegacy: tfds "mnist" is the STAND-IN at %s (%s), NOT MNIST: '
        'scikit-learn\'s 8x8 handwritten digits resized to 28x28, written by '
        '`flaxlegacy data mnist` because the real MNIST files were not '
        'available. Accuracies are not MNIST accuracies. For real MNIST run '
        '`flaxlegacy data mnist --from DIR` with the four IDX files.',
        where, sizes)
  return True


# --- 3. offline guard -------------------------------------------------------


def _probe(host, port=443, timeout=PROBE_TIMEOUT_S):
  """None if ``host`` answers within ``timeout`` s, else why not."""
  result = {}

  def connect():
    try:
      socket.create_connection((host, port), timeout=timeout).close()
      result['ok'] = True
    except OSError as e:
      result['error'] = e

  # getaddrinfo has no timeout of its own; a thread bounds it.
  thread = threading.Thread(target=connect, daemon=True)
  thread.start()
  thread.join(2 * timeout)
  if result.get('ok'):
    return None
  error = result.get('error')
  return (f'{host} does not answer ({error})' if error else
          f'{host} does not answer within {2 * timeout:.0f} s')


def offline_reason():
  """Why this process counts as offline, or None if it may download."""
  value = os.environ.get(ENV_OFFLINE, '').strip().lower()
  if value in _TRUE:
    return f'{ENV_OFFLINE}={os.environ[ENV_OFFLINE]}'
  if value in _FALSE:
    return None
  if any(os.environ.get(v) for v in _PROXY_VARS):
    return None  # a proxy may reach what direct connections cannot
  with _lock:
    if _state['probe'] is None:
      reason = _probe(PROBE_HOST)
      _state['probe'] = ('no network: ' + reason) if reason else ''
    return _state['probe'] or None


def not_prepared_message(builder, reason):
  name = builder.name
  data_dir = os.path.dirname(os.path.dirname(str(builder.data_path)))
  head = (f'tfds dataset {name!r} (version {builder.version}) is not prepared '
          f'in {data_dir} and this process is offline ({reason}), so '
          'downloading it would only fail after minutes of retries.')
  if name == 'mnist':
    fix = (' Run `flaxlegacy data mnist` first: it prepares MNIST from the '
           'IDX files (`--from DIR`) or, without them, a clearly labelled '
           'stand-in from scikit-learn\'s digits.')
  else:
    fix = (f' Prepare {name!r} on a machine with network (`tfds build '
           f'{name}`) and copy the data dir here, or point TFDS_DATA_DIR at '
           'a prepared copy.')
  return head + fix + (f' Set {ENV_OFFLINE}=0 to let TFDS try to download '
                       'anyway.')


def check_can_prepare(builder):
  """Raises ``DatasetNotPreparedError`` if preparing would need a network."""
  if getattr(builder, '_flaxlegacy_local', False):
    return
  if builder.data_path.exists():
    return  # TFDS will reuse it
  reason = offline_reason()
  if reason:
    raise DatasetNotPreparedError(not_prepared_message(builder, reason))


# --- installation -----------------------------------------------------------


def _wrap(cls, name, before):
  original = getattr(cls, name)
  if getattr(original, '_flaxlegacy', False):
    return

  @functools.wraps(original)
  def wrapper(self, *args, **kwargs):
    before(self)
    return original(self, *args, **kwargs)

  wrapper._flaxlegacy = True  # pylint: disable=protected-access
  wrapper._flaxlegacy_original = original  # pylint: disable=protected-access
  setattr(cls, name, wrapper)


def apply(tfds):
  """Applies the three additions to an imported ``tensorflow_datasets``."""
  with _lock:
    if _state['applied'] or not enabled():
      return
    _state['applied'] = True
    base = tfds.core.DatasetBuilder
    _wrap(base, 'download_and_prepare', check_can_prepare)
    _wrap(base, 'as_dataset', announce_standin)
    register_standin(tfds)


def remove(tfds):
  """Undoes ``apply`` (for tests)."""
  with _lock:
    base = tfds.core.DatasetBuilder
    for name in ('download_and_prepare', 'as_dataset'):
      method = getattr(base, name)
      original = getattr(method, '_flaxlegacy_original', None)
      if original is not None:
        setattr(base, name, original)
    _state.update(applied=False, registered=None, announced=set(), probe=None)


class _Loader(importlib.abc.Loader):
  """Runs the real ``tensorflow_datasets``, then ``apply``."""

  def __init__(self, loader):
    self._loader = loader

  def create_module(self, spec):
    return self._loader.create_module(spec)

  def exec_module(self, module):
    self._loader.exec_module(module)
    try:
      apply(module)
    except Exception:  # pylint: disable=broad-except
      logger.debug('flaxlegacy: tfds hook not applied', exc_info=True)

  def __getattr__(self, name):
    return getattr(self._loader, name)


class _Finder(importlib.abc.MetaPathFinder):
  """Wraps the loader of ``tensorflow_datasets`` (and nothing else)."""

  def find_spec(self, fullname, path=None, target=None):
    if fullname != 'tensorflow_datasets':
      return None
    for finder in sys.meta_path:
      if isinstance(finder, _Finder):
        continue
      find_spec = getattr(finder, 'find_spec', None)
      spec = find_spec(fullname, path, target) if find_spec else None
      if spec is not None:
        if spec.loader is not None and not isinstance(spec.loader, _Loader):
          spec.loader = _Loader(spec.loader)
        return spec
    return None


def install():
  """Applies now if tfds is imported, else when it is (idempotent, cheap)."""
  if not enabled():
    return
  module = sys.modules.get('tensorflow_datasets')
  if module is not None:
    apply(module)
  elif not any(isinstance(f, _Finder) for f in sys.meta_path):
    sys.meta_path.insert(0, _Finder())
