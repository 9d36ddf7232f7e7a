"""``jax.lib.xla_client`` as 2020-2021 programs used it (removed in jax 0.9.0).

Until jax 0.4.x ``jax.lib.xla_client`` was jaxlib's ``xla_client`` module
itself; later releases deprecated its names one by one and jax 0.9.0
removed the module.  Served by the import hook for ``from jax.lib import
xla_client`` / ``import jax.lib.xla_client`` (only where JAX has no such
module) and added as the attribute ``jax.lib.xla_client`` at activation:
every name today's ``jaxlib.xla_client`` still has (``Device``, ``Client``,
``Shape``, ``PrimitiveType``, ``OpSharding``, ``XlaRuntimeError``,
``register_custom_call_target``, ``_xla`` ...) is that object, plus
``bfloat16`` (``ml_dtypes.bfloat16``, which legacy exported there) and the
``PaddingType`` enum (``VALID`` = 1, ``SAME`` = 2), which research code
used to compute convolution paddings (scenic's masked layers).  Names
of the removed XlaBuilder API (``ops``, ``XlaBuilder``,
``shape_from_pyval`` ...) raise an AttributeError that says so.
"""

import enum

from jaxlib import xla_client as _xla_client


class PaddingType(enum.Enum):
  """``xla_client.PaddingType`` (gone from jaxlib): code maps 'SAME' / 'VALID'
  strings to it to compute convolution paddings itself."""
  VALID = 1
  SAME = 2


def __getattr__(name):
  if name == 'bfloat16':
    import ml_dtypes  # pylint: disable=g-import-not-at-top
    return ml_dtypes.bfloat16
  try:
    return getattr(_xla_client, name)
  except AttributeError:
    raise AttributeError(
        f'jax.lib.xla_client.{name} is gone from jaxlib (the XlaBuilder-era '
        'API was removed); flaxlegacy serves jax.lib.xla_client as today\'s '
        'jaxlib.xla_client, which has no such name') from None


def __dir__():
  return sorted(set(dir(_xla_client)) | {'bfloat16', 'PaddingType'})
