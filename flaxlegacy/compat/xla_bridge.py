"""``jax.lib.xla_bridge`` as legacy programs used it (removed from JAX).

Served by the import hook for ``from jax.lib import xla_bridge`` /
``import jax.lib.xla_bridge`` (only where JAX has no such module) and added as
the attribute ``jax.lib.xla_bridge`` at activation.  It offers what 2020-2021
programs called: ``get_backend()`` (memoized, with ``cache_clear``; its result
has ``.platform``), the device and process counts, ``devices`` /
``local_devices`` and ``default_backend``.  Other names of the old internal
module raise an AttributeError that says so.

Like the legacy function, ``get_backend.cache_clear()`` forgets the memoized
backends; it does not tear down a backend JAX has already created (legacy JAX
kept its XLA clients too), so a changed ``XLA_FLAGS`` takes effect only if no
backend existed yet, as before.
"""

import functools

import jax
from jax.extend import backend as _backend


@functools.lru_cache(maxsize=None)
def get_backend(platform=None):
  """The XLA client of ``platform`` (default: JAX's default backend)."""
  return _backend.get_backend(platform)


def default_backend():
  return jax.default_backend()


def device_count(backend=None):
  return jax.device_count(backend)


def local_device_count(backend=None):
  return jax.local_device_count(backend)


def devices(backend=None):
  return jax.devices(backend)


def local_devices(process_index=None, backend=None, host_id=None):
  if process_index is None:
    process_index = host_id
  return jax.local_devices(process_index, backend)


def process_index(backend=None):
  return jax.process_index(backend)


def process_count(backend=None):
  return jax.process_count(backend)


host_id = process_index
host_count = process_count


def host_ids(backend=None):
  return list(range(jax.process_count(backend)))


process_indices = host_ids

_SERVED = ('get_backend', 'default_backend', 'device_count',
           'local_device_count', 'devices', 'local_devices', 'process_index',
           'process_count', 'process_indices', 'host_id', 'host_count',
           'host_ids')


def __getattr__(name):
  if name.startswith('__'):
    raise AttributeError(name)
  raise AttributeError(
      f'jax.lib.xla_bridge.{name} is not provided: JAX removed '
      'jax.lib.xla_bridge, and flaxlegacy serves only the names legacy '
      f'programs used ({", ".join(_SERVED)}). See docs/coverage.md.')
