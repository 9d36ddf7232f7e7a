"""The legacy attention cache on linen's ``'cache'`` collection (used by
``flaxlegacy upgrade``, rules/attention_cache.py).

Plain JAX + ``flax.struct`` on top of linen: importing this module does not
activate the compatibility layer, so upgraded code that uses it runs with
``FLAXLEGACY=off``.

Legacy ``flax.nn.attention.Cache`` was an ``nn.Collection`` passed to the
model call: at init every module that got it stored a shape description
(``np.array((ndim,) + tail)``); ``initialize_cache(shape)`` turned each into
an entry ``(key, value, i)`` of zeros of ``shape + tail`` (``i`` a uint32
scalar); each decoding call under ``cache.mutate()`` read its module's entry
(``retrieve``) and stored the next (``store``).  Upgraded, the cache is the
dict of linen's ``'cache'`` collection (``{'cache': {...}}``, as apply's
``mutable=['cache']`` returns it):

* a module that stored / retrieved its own entry uses ``legacy_cache_store``
  / ``legacy_cache_retrieve`` (one variable ``cache_entry`` of the module's
  ``'cache'`` collection, holding a ``LegacyCacheEntry`` with the legacy
  fields and ``.replace``);
* linen's ``MultiHeadDotProductAttention(decode=True)`` keeps its own
  variables there (``cached_key``, ``cached_value``, ``cache_index``);
* ``legacy_initialize_cache(cache, shape)`` is ``initialize_cache``: zeros
  of ``shape + tail`` for every array of the cache the model's init made
  (its first ``len(shape)`` axes replaced by ``shape``), scalars (the
  positions) zero.
"""

import jax
import jax.numpy as jnp
# distinct local names: the helper copy (upgrade/shipping.py) binds each
# name once for every helper module, and other helpers import numpy locally
from flax import struct as _flax_struct
import numpy as _numpy

__all__ = ['LegacyCacheEntry', 'legacy_cache_store', 'legacy_cache_retrieve',
           'legacy_initialize_cache']

CACHE_ENTRY = 'cache_entry'


@_flax_struct.dataclass
class LegacyCacheEntry:
  """A legacy cache entry: ``key`` / ``value`` arrays and the position
  ``i`` (uint32), with ``.replace(...)`` as legacy's."""
  key: jax.Array
  value: jax.Array
  i: jax.Array


def _entry_of_shape(shape_data):
  """The entry a legacy init's shape description stands for, at a
  placeholder size 1 on the axes ``initialize_cache`` sets."""
  data = _numpy.asarray(shape_data)
  if data.ndim != 1 or not _numpy.issubdtype(data.dtype, _numpy.integer):
    raise ValueError(
        'a legacy attention cache stores, at init, an integer array '
        f'(ndim,) + tail shape; got {data!r}')
  ndim, tail = int(data[0]), tuple(int(d) for d in data[1:])
  if ndim < len(tail):
    raise ValueError(f'cache shape description {data!r}: ndim {ndim} is '
                     f'smaller than the tail {tail}')
  full = (1,) * (ndim - len(tail)) + tail
  return LegacyCacheEntry(key=jnp.zeros(full, jnp.float32),
                          value=jnp.zeros(full, jnp.float32),
                          i=jnp.zeros((), jnp.uint32))


def legacy_cache_store(module, value):
  """Legacy ``cache.store(value)`` inside ``module`` (linen): its entry of
  the ``'cache'`` collection; at init, ``value`` is the legacy shape
  description."""
  if module.is_initializing():
    value = _entry_of_shape(value)
  module.put_variable('cache', CACHE_ENTRY, value)


def legacy_cache_retrieve(module, default=None):
  """Legacy ``cache.retrieve(default)`` inside ``module`` (linen)."""
  return module.get_variable('cache', CACHE_ENTRY, default)


def legacy_initialize_cache(cache, shape, dtype=None):
  """Legacy ``cache_def.initialize_cache(shape, dtype=None)``.

  ``cache``: the cache collection the model's init made (``{'cache':
  {...}}``).  Every array becomes zeros of ``shape + its trailing axes``
  (legacy: ``shape + tail``), of ``dtype`` where given and the array is a
  float; scalars (decoding positions) become zeros of their dtype.
  """
  shape = tuple(int(d) for d in shape)

  def init(leaf):
    leaf_shape = tuple(_numpy.shape(leaf))
    leaf_dtype = jnp.result_type(leaf)
    if not leaf_shape:
      return jnp.zeros((), leaf_dtype)
    if len(leaf_shape) < len(shape):
      raise ValueError(
          f'initialize_cache({shape}): a cache array of shape {leaf_shape} '
          'has fewer axes than the shape (batch and attention axes)')
    if dtype is not None and jnp.issubdtype(leaf_dtype, jnp.floating):
      leaf_dtype = dtype
    return jnp.zeros(shape + leaf_shape[len(shape):], leaf_dtype)

  return jax.tree_util.tree_map(init, cache)
