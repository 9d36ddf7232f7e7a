"""Issue 18 sections 2 and 3: NumPy, Python and JAX names removed since 2020.

Each is added at activation (legacy processes only), only where absent, with
its 2020 meaning.  Most cases run a fresh interpreter: activation is once per
process, and a modern process must not get the names.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from flaxlegacy import _names
from tests import conformance

LEGACY = 'import flaxlegacy; flaxlegacy.activate()\n'


def run_python(code, env=None, legacy=False):
  """stdout lines of ``code`` in a fresh interpreter (activated first when
  ``legacy``)."""
  code = (LEGACY if legacy else '') + textwrap.dedent(code)
  full_env = dict(os.environ)
  full_env.setdefault('JAX_PLATFORMS', 'cpu')
  for k in ('FLAXLEGACY', 'XLA_FLAGS'):
    full_env.pop(k, None)
  full_env['PYTHONPATH'] = conformance.REPO + os.pathsep + full_env.get(
      'PYTHONPATH', '')
  full_env.update(env or {})
  proc = subprocess.run([sys.executable, '-c', code],
                        env=full_env, capture_output=True, text=True,
                        timeout=300, cwd=conformance.REPO)
  if proc.returncode != 0:
    raise AssertionError(f'subprocess failed ({proc.returncode}):\n'
                         f'{proc.stdout}\n{proc.stderr}')
  return proc.stdout.splitlines()


# --- section 2: NumPy and Python ---------------------------------------------


def test_numpy_names_have_their_old_meanings_in_a_legacy_process():
  out = run_python(legacy=True, code='''
      import builtins, math, operator, functools, warnings
      import numpy as np
      warnings.simplefilter('error')  # the served names warn about nothing
      # The symmetry-counting pattern of the sparse-training codebase.
      counts = [2, 3, 1]
      n = functools.reduce(operator.mul, (np.math.factorial(t) for t in counts))
      print(n, np.math is math)
      print(np.float is float, np.int is int, np.object is object,
            np.str is str, np.complex is complex, np.unicode is str)
      print(np.float_ is np.float64, np.complex_ is np.complex128,
            np.string_ is np.bytes_, np.unicode_ is np.str_,
            np.cfloat is np.complex128, np.longfloat is np.longdouble,
            np.bool8 is np.bool_, np.int0 is np.intp, np.object0 is np.object_)
      print(np.NaN != np.NaN, np.Inf == np.inf == np.PINF == np.infty,
            np.NINF == -np.inf, math.copysign(1, np.NZERO), np.PZERO)
      a = np.array([[3, 1], [2, 4]])
      print(np.product(a), np.cumproduct(a).tolist(), np.sometrue(a > 3),
            np.alltrue(a > 0), np.round_(2.567, 1))
      print(np.msort(a).tolist(), np.trapz([1, 2, 3]),
            np.in1d([[1, 5], [2, 7]], [1, 2]).tolist())
      print(np.asfarray([1, 2]).dtype, np.asfarray([1, 2], np.float32).dtype,
            np.asfarray([1, 2], np.int32).dtype, np.asscalar(np.array([7])))
      print(np.find_common_type([np.int8, np.uint8], []),
            np.find_common_type([np.float32], [np.int64]),
            np.find_common_type([np.int32], [np.float64]),
            np.find_common_type([], []))
      c = np.cast[np.float32]([1, 2])
      print(c.dtype, c.tolist(), np.issubclass_(int, 3), np.safe_eval('[1, 2]'))
      np.float(3) + np.int(2)  # the constructors are the builtins'
  ''')
  assert out == [
      '12 True',
      'True True True True True True',
      'True True True True True True True True True',
      'True True True -1.0 0.0',
      '24 [3, 3, 6, 24] True True 2.6',
      '[[2, 1], [3, 4]] 4.0 [True, False, True, False]',
      'float64 float32 float64 7',
      'int16 float32 float64 None',
      'float32 [1.0, 2.0] False [1, 2]',
  ]


def test_python_names_have_their_old_meanings_in_a_legacy_process():
  out = run_python(legacy=True, code='''
      import collections, collections.abc, inspect
      # The protein-library pattern: an isinstance check at import time.
      tokens = ('M', 'K')
      print(isinstance(tokens, collections.Iterable),
            isinstance(3, collections.Iterable),
            isinstance({}, collections.MutableMapping),
            isinstance((), collections.Sequence),
            isinstance(len, collections.Callable),
            collections.Mapping is collections.abc.Mapping)
      def f(a, b=2, *rest, **kw):
        pass
      spec = inspect.getargspec(f)
      print(spec, type(spec).__name__, spec.keywords)
      try:
        inspect.getargspec(lambda a, *, b: None)
      except ValueError as e:
        print('ValueError', e)
  ''')
  assert out[0] == 'True False True True True True'
  assert out[1] == ("ArgSpec(args=['a', 'b'], varargs='rest', keywords='kw', "
                    "defaults=(2,)) ArgSpec kw")
  assert out[2].startswith('ValueError Function has keyword-only parameters')


NOT_SERVED = '''
    import warnings; warnings.simplefilter('ignore')
    import collections, inspect, numpy as np, jax
    import flax.jax_utils
    names = {'np.float': (np, 'float'), 'np.math': (np, 'math'),
             'np.float_': (np, 'float_'), 'np.NaN': (np, 'NaN'),
             'collections.Iterable': (collections, 'Iterable'),
             'inspect.getargspec': (inspect, 'getargspec'),
             'jax.custom_transforms': (jax, 'custom_transforms'),
             'jax.device_put_sharded': (jax, 'device_put_sharded'),
             'flax.jax_utils._replicate': (flax.jax_utils, '_replicate')}
    print(sorted(k for k, (m, n) in names.items() if hasattr(m, n)))
    print(np.bool is np.bool_, np.long is np.int_ or np.long.__name__)
'''


@pytest.mark.parametrize('env,prefix', [
    ({}, ''),                       # start-up hook on, never activated
    ({'FLAXLEGACY': 'off'}, ''),    # hook off
])
def test_a_modern_process_does_not_get_them(env, prefix):
  out = run_python(prefix + NOT_SERVED, env=env)
  assert out[0] == '[]'
  assert out[1].startswith('True')  # np.bool is NumPy 2's, untouched


def test_bool_and_long_keep_their_numpy2_meanings_in_a_legacy_process():
  out = run_python(legacy=True, code='''
      import numpy as np
      print(np.bool is np.bool_, np.long is not int, type(np.long(3)) is not int)
  ''')
  assert out == ['True True True']


def test_table_lists_the_numpy_family():
  """NumPy's own tables of removed names, as far as 2020 code used them."""
  served = {a.name for a in _names.NUMPY_ALIASES}
  issue_list = {
      'float', 'int', 'object', 'str', 'complex', 'unicode', 'math', 'float_',
      'complex_', 'string_', 'unicode_', 'NaN', 'Inf', 'NINF', 'PINF', 'infty',
      'product', 'cumproduct', 'sometrue', 'alltrue', 'asfarray', 'round_',
      'asscalar', 'msort', 'trapz', 'in1d', 'find_common_type', 'cast'}
  assert issue_list <= served, sorted(issue_list - served)
  assert not {'bool', 'long'} & served
  assert set(_names.CHANGED_MEANING) == {'numpy.bool', 'numpy.long'}


# --- section 3: JAX -----------------------------------------------------------


def test_xla_bridge_get_backend_cache_clear_pattern():
  """The trainer-test pattern: XLA_FLAGS set in setUp, then cache_clear()."""
  out = run_python('''
      import os
      from jax.lib import xla_bridge   # no legacy import before: the hook
      import jax
      os.environ['XLA_FLAGS'] = '--xla_force_host_platform_device_count=8'
      xla_bridge.get_backend.cache_clear()
      backend = xla_bridge.get_backend()
      print(backend.platform, backend is xla_bridge.get_backend(),
            jax.device_count(), xla_bridge.device_count(),
            xla_bridge.local_device_count(), xla_bridge.host_id(),
            xla_bridge.process_index(), xla_bridge.host_count())
      xla_bridge.get_backend.cache_clear()
      print(xla_bridge.get_backend.cache_info().currsize,
            xla_bridge.get_backend() is backend,
            xla_bridge.get_backend('cpu').platform == jax.default_backend())
      import jax.lib
      print(jax.lib.xla_bridge is xla_bridge)
      try:
        xla_bridge.constant
      except AttributeError as e:
        print('AttributeError', e)
  ''')
  assert out[0] == 'cpu True 8 8 8 0 0 1'
  # cache_clear forgets the memo; the backend JAX created lives on (legacy
  # JAX kept its XLA clients too).
  assert out[1] == '0 True True'
  assert out[2] == 'True'
  assert out[3].startswith('AttributeError jax.lib.xla_bridge.constant is '
                           'not provided')


def test_xla_bridge_attribute_after_activation():
  out = run_python(legacy=True, code='''
      import jax, jax.lib
      print(jax.lib.xla_bridge.get_backend().platform == jax.default_backend())
  ''')
  assert out == ['True']


DEVICE_PUT = '''
    import jax, jax.numpy as jnp, numpy as np
    devices = jax.local_devices()
    assert len(devices) == 8
    shards = [np.arange(3, dtype=np.float32) + 10 * i for i in range(8)]
    y = jax.device_put_sharded(shards, devices)
    print(y.shape, y.dtype, [s.device == d for s, d in
                             zip(y.addressable_shards, devices)].count(True),
          all(np.array_equal(s.data[0], shards[i])
              for i, s in enumerate(y.addressable_shards)))
    print(jax.pmap(lambda x: jax.lax.psum(x, 'i'), axis_name='i')(y)[3].tolist())
    tree = jax.device_put_sharded(
        [{'a': i, 'b': (jnp.full(2, i),)} for i in range(8)], devices)
    print(tree['a'].tolist(), tree['b'][0].shape)
    r = jax.device_put_replicated({'w': jnp.arange(4.)}, devices)
    print(r['w'].shape, [s.device for s in r['w'].addressable_shards] == devices,
          jax.pmap(lambda d: d['w'].sum())(r).tolist())
    for bad in (lambda: jax.device_put_sharded(shards[:7], devices),
                lambda: jax.device_put_sharded(
                    shards[:7] + [np.zeros(4, np.float32)], devices),
                lambda: jax.device_put_sharded(np.zeros((8, 2)), devices),
                lambda: jax.device_put_replicated(1., [])):
      try:
        bad()
      except (ValueError, TypeError) as e:
        print(type(e).__name__, e)
'''


def test_device_put_sharded_and_replicated_on_8_devices():
  out = run_python(DEVICE_PUT, legacy=True, env={
      'XLA_FLAGS': '--xla_force_host_platform_device_count=8'})
  assert out[0] == '(8, 3) float32 8 True'
  # psum over the 8 shards of 10 * i + k: 280 + 8 * k.
  assert out[1] == '[280.0, 288.0, 296.0]'
  assert out[2] == '[0, 1, 2, 3, 4, 5, 6, 7] (8, 2)'
  assert out[3] == '(8, 4) True [6.0, 6.0, 6.0, 6.0, 6.0, 6.0, 6.0, 6.0]'
  assert out[4] == 'ValueError len(shards) = 7 must equal len(devices) = 8.'
  assert out[5] == ('ValueError the shards passed to device_put_sharded must '
                    'have consistent shape and dtype, but got float32[3] and '
                    'float32[4].')
  assert out[6].startswith('TypeError device_put_sharded `shards` input must '
                           'be a sequence')
  assert out[7] == ('ValueError `devices` argument to `device_put_replicated '
                    'must be a non-empty sequence.')


def test_device_put_sharded_left_alone_in_a_modern_process():
  out = run_python('''
      import jax
      try:
        jax.device_put_sharded
      except AttributeError as e:
        print('deprecated' in str(e))
  ''')
  assert out == ['True']
