"""Names 2020-2021 test files imported from ``jax.test_util``.

JAX moved its test infrastructure to the private ``jax._src.test_util`` and
kept only ``check_grads`` / ``check_jvp`` / ``check_vjp`` public.  Legacy test
files (Flax's own, and research code's) subclassed ``jtu.JaxTestCase`` and
called ``jtu.check_eq``, ``jtu.check_close``, ``jtu.rand_*`` ... .  This module
re-implements that contract on NumPy and absl; it is installed into
``jax.test_util`` at activation, name by name, only where absent.

The tolerances are legacy's per-dtype defaults (atol == rtol): bfloat16
1e-2, float16 1e-3, float32 1e-6, float64 1e-15, complex64 1e-6, complex128
1e-15, exact for integers and bools.
"""

import functools
import zlib

from absl.testing import parameterized
import jax
import numpy as np

_DEFAULT_TOLERANCE = {
    'bfloat16': 1e-2, 'float16': 1e-3, 'float32': 1e-6, 'float64': 1e-15,
    'complex64': 1e-6, 'complex128': 1e-15,
}


def _dtype(x):
  if hasattr(x, 'dtype'):
    return np.dtype(x.dtype)
  return np.asarray(x).dtype


def default_tolerance():
  """The per-dtype default tolerances, keyed by ``np.dtype``."""
  out = {}
  for name, tol in _DEFAULT_TOLERANCE.items():
    try:
      out[np.dtype(name)] = tol
    except TypeError:  # bfloat16 is not a NumPy dtype name
      import ml_dtypes  # pylint: disable=g-import-not-at-top
      out[np.dtype(ml_dtypes.bfloat16)] = tol
  return out


def tolerance(dtype, tol=None):
  """``tol`` for ``dtype``: a number as is, a dict looked up by dtype, or
  the default tolerance of ``dtype`` when None."""
  dtype = np.dtype(dtype)
  if isinstance(tol, dict):
    tol = {np.dtype(k): v for k, v in tol.items()}.get(dtype)
  if tol is None:
    return _DEFAULT_TOLERANCE.get(dtype.name, 0.0)
  return tol


def _as_float_array(x):
  x = np.asarray(x)
  if x.dtype.name == 'bfloat16':
    x = x.astype(np.float32)
  return x


def _assert_numpy_allclose(a, b, atol=None, rtol=None, err_msg=''):
  a, b = _as_float_array(a), _as_float_array(b)
  if a.shape != b.shape:
    raise AssertionError(f'shapes differ: {a.shape} vs {b.shape}. {err_msg}')
  kw = {}
  if atol is not None:
    kw['atol'] = atol
  if rtol is not None:
    kw['rtol'] = rtol
  np.testing.assert_allclose(a, b, err_msg=err_msg, **kw)


def _tree_pairs(xs, ys):
  x_leaves, x_def = jax.tree_util.tree_flatten(xs)
  y_leaves, y_def = jax.tree_util.tree_flatten(ys)
  assert x_def == y_def, f'tree structures differ: {x_def} vs {y_def}'
  return zip(x_leaves, y_leaves)


def check_eq(xs, ys, err_msg=''):
  """Same tree structure, leaves equal up to ``np.testing.assert_allclose``'s
  default tolerance."""
  for x, y in _tree_pairs(xs, ys):
    _assert_numpy_allclose(x, y, err_msg=err_msg)


def check_close(xs, ys, atol=None, rtol=None, err_msg=''):
  """Same tree structure, leaves close within the per-dtype tolerance (the
  larger of the two leaves' defaults unless ``atol`` / ``rtol`` are given)."""
  for x, y in _tree_pairs(xs, ys):
    a = max(tolerance(_dtype(x), atol), tolerance(_dtype(y), atol))
    r = max(tolerance(_dtype(x), rtol), tolerance(_dtype(y), rtol))
    _assert_numpy_allclose(x, y, atol=a, rtol=r, err_msg=err_msg)


def device_under_test():
  """The platform tests run on: 'cpu', 'gpu' or 'tpu'."""
  return jax.default_backend()


def skip_on_devices(*disabled_devices):
  """Decorator: skip the test on the named platforms."""
  def skip(test_method):
    @functools.wraps(test_method)
    def test_method_wrapper(self, *args, **kwargs):
      device = device_under_test()
      if device in disabled_devices:
        self.skipTest(f'{test_method.__name__} not supported on {device}.')
      return test_method(self, *args, **kwargs)
    return test_method_wrapper
  return skip


def format_shape_dtype_string(shape, dtype):
  """'float32[2,3]' (legacy test-name fragments)."""
  if isinstance(shape, (int, np.integer)):
    shape = (shape,)
  return f'{np.dtype(dtype).name}[{",".join(str(d) for d in shape)}]'


def cases_from_list(xs):
  """The test cases as a list (legacy sampled them down by a flag)."""
  return list(xs)


# --- random argument generators: rand_x(rng) -> fn(shape, dtype) -----------


def _cast(values, dtype):
  dtype = np.dtype(dtype)
  if np.issubdtype(dtype, np.complexfloating):
    return values.astype(dtype)
  return np.asarray(np.real(values)).astype(dtype)


def _rand_scaled(rng, scale, post=lambda x: x):
  def fn(shape, dtype):
    values = scale * rng.standard_normal(shape)
    if np.issubdtype(np.dtype(dtype), np.complexfloating):
      values = values + 1j * scale * rng.standard_normal(shape)
    return _cast(post(np.asarray(values)), dtype)
  return fn


def rand_default(rng, scale=3):
  return _rand_scaled(rng, scale)


def rand_small(rng):
  return _rand_scaled(rng, 1e-3)


def rand_positive(rng):
  return _rand_scaled(rng, 2, lambda x: np.abs(x) + 1)


def rand_nonzero(rng):
  return _rand_scaled(rng, 3, lambda x: np.where(x == 0, 1, x))


def rand_not_small(rng, offset=10.):
  return _rand_scaled(rng, 3, lambda x: x + np.where(x > 0, offset, -offset))


def rand_uniform(rng, low=0.0, high=1.0):
  def fn(shape, dtype):
    return _cast(rng.uniform(low, high, size=shape), dtype)
  return fn


def rand_int(rng, low=0, high=None):
  def fn(shape, dtype):
    hi = high
    if hi is None:
      hi = np.iinfo(dtype).max if np.issubdtype(dtype, np.integer) else 100
    return rng.randint(low, hi, size=shape).astype(dtype)
  return fn


def rand_bool(rng):
  def fn(shape, dtype):
    return rng.rand(*(shape if isinstance(shape, tuple) else (shape,))) < 0.5
  return fn


# --- JaxTestCase ------------------------------------------------------------


class JaxTestCase(parameterized.TestCase):
  """Legacy ``jax.test_util.JaxTestCase``: absl's parameterized TestCase with
  JAX-aware assertions.

  ``self.rng()`` is a ``np.random.RandomState`` seeded from the test's name
  (the same numbers on every run), and ``assertAllClose`` compares trees of
  arrays with per-dtype tolerances, checking dtypes (canonicalized to JAX's
  precision) unless ``check_dtypes=False``.
  """

  def setUp(self):
    super().setUp()
    self._rng = np.random.RandomState(
        zlib.adler32(self._testMethodName.encode()))

  def rng(self):
    return self._rng

  def assertDtypesMatch(self, x, y, *, canonicalize_dtypes=True):
    dx, dy = _dtype(x), _dtype(y)
    if canonicalize_dtypes:
      canon = jax.dtypes.canonicalize_dtype
      dx, dy = np.dtype(canon(dx)), np.dtype(canon(dy))
    self.assertEqual(dx, dy, f'dtypes differ: {dx} vs {dy}')

  def assertArraysEqual(self, x, y, *, check_dtypes=True, err_msg=''):
    if check_dtypes:
      self.assertDtypesMatch(x, y)
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y),
                                  err_msg=err_msg)

  def assertArraysAllClose(self, x, y, *, check_dtypes=True, atol=None,
                           rtol=None, err_msg=''):
    self.assertEqual(np.shape(x), np.shape(y),
                     f'shapes differ: {np.shape(x)} vs {np.shape(y)}')
    atol = max(tolerance(_dtype(x), atol), tolerance(_dtype(y), atol))
    rtol = max(tolerance(_dtype(x), rtol), tolerance(_dtype(y), rtol))
    _assert_numpy_allclose(x, y, atol=atol, rtol=rtol, err_msg=err_msg)
    if check_dtypes:
      self.assertDtypesMatch(x, y)

  def assertAllClose(self, x, y, check_dtypes=True, atol=None, rtol=None,
                     canonicalize_dtypes=True, err_msg=''):
    """Trees (dicts, lists, tuples) of arrays or scalars, leaf by leaf."""
    kw = dict(check_dtypes=check_dtypes, atol=atol, rtol=rtol,
              canonicalize_dtypes=canonicalize_dtypes, err_msg=err_msg)
    if isinstance(x, dict):
      self.assertIsInstance(y, dict)
      self.assertEqual(set(x), set(y))
      for k in x:
        self.assertAllClose(x[k], y[k], **kw)
    elif isinstance(x, (list, tuple)) and not hasattr(x, '__array__'):
      self.assertIsInstance(y, (list, tuple))
      self.assertEqual(len(x), len(y))
      for a, b in zip(x, y):
        self.assertAllClose(a, b, **kw)
    elif hasattr(x, '__array__') or np.isscalar(x):
      self.assertTrue(hasattr(y, '__array__') or np.isscalar(y),
                      f'{type(y)} is not an array or scalar')
      if check_dtypes:
        self.assertDtypesMatch(x, y, canonicalize_dtypes=canonicalize_dtypes)
      self.assertArraysAllClose(np.asarray(x), np.asarray(y),
                                check_dtypes=False, atol=atol, rtol=rtol,
                                err_msg=err_msg)
    elif x == y:
      return
    else:
      raise TypeError((type(x), type(y)))

  def assertMultiLineStrippedEqual(self, expected, what):
    """Equal after stripping each line and dropping blank lines."""
    def strip(text):
      return '\n'.join(line.strip() for line in text.strip().splitlines()
                       if line.strip())
    expected, what = strip(expected), strip(what)
    self.assertMultiLineEqual(expected, what)

  def _CompileAndCheck(self, fun, args_maker, *, check_dtypes=True,
                       rtol=None, atol=None, **unused):
    """``fun`` and ``jax.jit(fun)`` agree on fresh arguments."""
    del unused
    args = args_maker()
    python_ans = fun(*args)
    compiled_ans = jax.jit(fun)(*args)
    self.assertAllClose(python_ans, compiled_ans, check_dtypes=check_dtypes,
                        atol=atol, rtol=rtol)
    args = args_maker()
    self.assertAllClose(fun(*args), jax.jit(fun)(*args),
                        check_dtypes=check_dtypes, atol=atol, rtol=rtol)

  def _CheckAgainstNumpy(self, numpy_reference_op, lax_op, args_maker,
                         check_dtypes=True, tol=None, atol=None, rtol=None,
                         canonicalize_dtypes=True):
    """``lax_op`` matches ``numpy_reference_op`` on the same arguments."""
    args = args_maker()
    lax_ans = lax_op(*args)
    numpy_ans = numpy_reference_op(*args)
    self.assertAllClose(numpy_ans, lax_ans, check_dtypes=check_dtypes,
                        atol=atol or tol, rtol=rtol or tol,
                        canonicalize_dtypes=canonicalize_dtypes)

