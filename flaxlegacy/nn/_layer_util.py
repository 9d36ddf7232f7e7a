"""Small helpers shared by the legacy layers (not legacy API).

* ``where(module)`` / ``layer_error``: layer-specific errors keep legacy's
  message (legacy tests match on it) and append the module path, so a failing
  layer deep inside a model is found at once.
* ``linen_apply``: runs a linen module over parameters the legacy frame
  created.  This is the one seam through which legacy layers borrow linen
  arithmetic.
"""

import jax


def where(module):
  """The path of the executing legacy module (e.g. ``'/encoder/Dense_0'``)."""
  frame = getattr(module, '_frame', None)
  path = getattr(frame, 'path', None)
  return path if path is not None else '?'


def layer_error(module, exc_type, message):
  """``exc_type`` whose text is legacy's ``message`` plus the module path."""
  return exc_type(f'{message} (in module {where(module)})')


# Linen validates the shape of an existing parameter by tracing its
# initializer abstractly on every apply.  The values always come from the
# legacy frame, so give linen the cheapest initializer to trace.
def unused_init(key, shape, dtype=jax.numpy.float32):
  del key
  return jax.numpy.zeros(shape, dtype)


def linen_apply(linen_module, params, *args, **kwargs):
  """``linen_module.apply({'params': params}, *args)``.

  Linen modules are built with ``parent=None`` by the callers so that a legacy
  model called inside a linen ``compact`` method never binds them as children
  of that linen module.
  """
  return linen_module.apply({'params': params}, *args, **kwargs)
