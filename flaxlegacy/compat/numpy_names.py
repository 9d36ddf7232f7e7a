"""NumPy and Python names removed since 2020, with the meaning they had then.

Installed at activation, each only where absent (``_names.NUMPY_ALIASES`` /
``_names.PYTHON_ALIASES``).  Plain aliases (``np.float`` is ``float``,
``np.float_`` is ``np.float64`` ...) are named in the table directly; the
functions whose old behaviour needs a few lines live here.
"""

import ast
import collections
import inspect

import numpy as np

# --- constants NumPy 2.0 removed -------------------------------------------

NINF = -np.inf
NZERO = -0.0
PZERO = 0.0


# --- functions NumPy removed -------------------------------------------------


def product(a, *args, **kwargs):
  """Removed ``np.product``: ``np.prod``."""
  return np.prod(a, *args, **kwargs)


def cumproduct(a, *args, **kwargs):
  """Removed ``np.cumproduct``: ``np.cumprod``."""
  return np.cumprod(a, *args, **kwargs)


def sometrue(a, *args, **kwargs):
  """Removed ``np.sometrue``: ``np.any``."""
  return np.any(a, *args, **kwargs)


def alltrue(a, *args, **kwargs):
  """Removed ``np.alltrue``: ``np.all``."""
  return np.all(a, *args, **kwargs)


def round_(a, decimals=0, out=None):
  """Removed ``np.round_``: ``np.round``."""
  return np.round(a, decimals=decimals, out=out)


def msort(a):
  """Removed ``np.msort``: a sorted copy along the first axis."""
  return np.sort(a, axis=0)


def trapz(y, x=None, dx=1.0, axis=-1):
  """Removed ``np.trapz``: the trapezoidal rule (today ``np.trapezoid``)."""
  return np.trapezoid(y, x=x, dx=dx, axis=axis)


def in1d(ar1, ar2, assume_unique=False, invert=False, *, kind=None):
  """Removed ``np.in1d``: ``np.isin`` on the flattened ``ar1`` (1-D result)."""
  return np.isin(np.asarray(ar1).ravel(), ar2, assume_unique=assume_unique,
                 invert=invert, kind=kind)


def asfarray(a, dtype=np.float64):
  """Removed ``np.asfarray``: an array of an inexact dtype (float64 unless
  ``dtype`` is itself a float or complex type)."""
  if not np.issubdtype(dtype, np.inexact):
    dtype = np.float64
  return np.asarray(a, dtype=dtype)


def asscalar(a):
  """Removed ``np.asscalar``: ``a.item()``."""
  return a.item()


def issubclass_(arg1, arg2):
  """Removed ``np.issubclass_``: ``issubclass`` that is False on a TypeError."""
  try:
    return issubclass(arg1, arg2)
  except TypeError:
    return False


def safe_eval(source):
  """Removed ``np.safe_eval``: ``ast.literal_eval``."""
  return ast.literal_eval(source)


def mat(data, dtype=None):
  """Removed ``np.mat``: ``np.asmatrix``."""
  return np.asmatrix(data, dtype=dtype)


_KINDS = 'buifcSUVOMm'


def find_common_type(array_types, scalar_types):
  """Removed ``np.find_common_type`` (NumPy 1.x rule).

  The common type of ``array_types``, unless the common type of
  ``scalar_types`` is of a higher kind (bool < unsigned < signed < float <
  complex ...), in which case the common type of both.  None when both lists
  are empty.  The common type of a list is ``np.result_type`` (NumPy 1.x
  searched its type table for the same smallest safe type).
  """
  array_types = [np.dtype(t) for t in array_types]
  scalar_types = [np.dtype(t) for t in scalar_types]
  max_array = np.result_type(*array_types) if array_types else None
  max_scalar = np.result_type(*scalar_types) if scalar_types else None
  if max_array is None:
    return max_scalar
  if max_scalar is None:
    return max_array
  if _KINDS.find(max_scalar.kind) > _KINDS.find(max_array.kind):
    return np.result_type(max_array, max_scalar)
  return max_array


class _Cast(dict):
  """Removed ``np.cast``: ``np.cast[dtype](x)`` is ``np.asarray(x).astype(dtype)``."""

  def __missing__(self, key):
    dtype = np.dtype(key)

    def cast(x):
      return np.asarray(x).astype(dtype)

    cast.__name__ = f'cast_to_{dtype.name}'
    self[key] = cast
    return cast


cast = _Cast()


# --- jax.numpy names removed since 2020 (NumPy's removals, mirrored) -------


def jnp_product(a, *args, **kwargs):
  """Removed ``jnp.product``: ``jnp.prod``."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  return jnp.prod(a, *args, **kwargs)


def jnp_cumproduct(a, *args, **kwargs):
  """Removed ``jnp.cumproduct``: ``jnp.cumprod``."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  return jnp.cumprod(a, *args, **kwargs)


def jnp_sometrue(a, *args, **kwargs):
  """Removed ``jnp.sometrue``: ``jnp.any``."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  return jnp.any(a, *args, **kwargs)


def jnp_alltrue(a, *args, **kwargs):
  """Removed ``jnp.alltrue``: ``jnp.all``."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  return jnp.all(a, *args, **kwargs)


def jnp_round_(a, decimals=0, out=None):
  """Removed ``jnp.round_``: ``jnp.round``."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  return jnp.round(a, decimals=decimals, out=out)


def jnp_msort(a):
  """Removed ``jnp.msort``: sorted along the first axis."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  return jnp.sort(a, axis=0)


def jnp_trapz(y, x=None, dx=1.0, axis=-1):
  """Removed ``jnp.trapz``: ``jnp.trapezoid``."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  return jnp.trapezoid(y, x=x, dx=dx, axis=axis)


def jnp_in1d(ar1, ar2, assume_unique=False, invert=False):
  """Removed ``jnp.in1d``: ``jnp.isin`` on the flattened ``ar1``."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  return jnp.isin(jnp.ravel(ar1), ar2, assume_unique=assume_unique,
                  invert=invert)


def jnp_row_stack(tup, dtype=None):
  """Removed ``jnp.row_stack``: ``jnp.vstack``."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  return jnp.vstack(tup, dtype=dtype)
