"""Early linen (flax 0.3.x) in legacy processes: one test per restoration.

2021 code that mixed ``flax.nn`` / ``flax.optim`` with linen wrote its linen
half for flax 0.3.x.  Each pattern below is what such code did; it runs in
a fresh interpreter three ways: as a legacy process (a legacy import), as a
legacy process with the restoration opted out, and as a modern process (no
legacy import, FLAXLEGACY unset), where today's flax behaves as always.
The parameter-key numbers are compared with flax 0.3.6 linen, recorded on
the oracle by tests/early_linen/record_flax036.py (tests/early_linen/
flax036.json).
"""

import json
import os
import textwrap

import numpy as np
import pytest

from tests.test_activation import REPO, run_python

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, 'early_linen')

# Every pattern prints one line, "<name>: <result>" or "<name>: <error>".
PATTERNS = r'''
import functools, sys
import numpy as np
import jax, jax.numpy as jnp
LEGACY
import flax
from flax import linen as nn
from flax.training import early_stopping

key = jax.random.PRNGKey(0)
x = jnp.sin(jnp.arange(6.)).reshape(2, 3)

def case(fn):
  try:
    print(f'{fn.__name__}: {fn()}')
  except Exception as e:
    print(f'{fn.__name__}: {type(e).__name__}: {str(e).splitlines()[0]}')

# flax 0.3 linen derived a top-level parameter's key as fold_in(key, 1)
# (the counter folded in directly); today hashes it.
KERNEL_KEY = jax.random.fold_in(key, 1)

def cplx_init(rng, shape):  # a physics package's complex initializer
  return (jax.random.normal(rng, shape) +
          1j * jax.random.normal(jax.random.fold_in(rng, 7), shape))

@case
def two_arg_initializer():
  kernel = nn.Dense(4, kernel_init=cplx_init).init(key, x)['params']['kernel']
  return kernel.dtype, bool(jnp.array_equal(kernel,
                                            cplx_init(KERNEL_KEY, (3, 4))))

@case
def partial_with_dtype():
  init = functools.partial(
      jax.nn.initializers.variance_scaling(1.0, 'fan_in', 'normal'),
      dtype=jnp.complex64)
  dense = nn.Dense(4, kernel_init=init, dtype=jnp.complex64)
  kernel = dense.init(key, x)['params']['kernel']
  return kernel.dtype, bool(jnp.array_equal(kernel,
                                            init(KERNEL_KEY, (3, 4))))

@case
def initializer_stating_its_dtype():
  # built with dtype= (jax's initializers default to None): flax 0.3 called
  # init(key, shape), so the parameter got the initializer's dtype
  init = jax.nn.initializers.variance_scaling(1.0, 'fan_in', 'normal',
                                              dtype=jnp.complex64)
  kernel = nn.Dense(4, kernel_init=init, dtype=jnp.complex64).init(
      key, x)['params']['kernel']
  # a param_dtype the code sets, and an initializer stating none: today's
  bf16 = nn.Dense(4, param_dtype=jnp.bfloat16, kernel_init=init).init(
      key, x)['params']['kernel']
  plain = nn.Dense(4, kernel_init=jax.nn.initializers.lecun_normal()).init(
      key, x)['params']['kernel']
  return (kernel.dtype, bool(jnp.array_equal(kernel, init(KERNEL_KEY, (3, 4)))),
          bf16.dtype, plain.dtype)

@case
def static_initialize_carry():
  rng = jax.random.PRNGKey(3)
  c, h = nn.LSTMCell.initialize_carry(rng, (2,), 5)
  k1, k2 = jax.random.split(rng)
  normal = nn.initializers.normal(1.0)
  c2, h2 = nn.OptimizedLSTMCell.initialize_carry(rng, (2,), 5, normal)
  gru = nn.GRUCell.initialize_carry(rng, (2, 3), 4, normal)
  conv = nn.ConvLSTMCell.initialize_carry(rng, (2,), (4, 4, 3))
  return (c.shape, float(jnp.abs(c).sum() + jnp.abs(h).sum()),
          bool(jnp.array_equal(c2, normal(k1, (2, 5))) and
               jnp.array_equal(h2, normal(k2, (2, 5)))),
          bool(jnp.array_equal(gru, normal(rng, (2, 3, 4)))),
          conv[0].shape)

@case
def cell_without_features():
  carry = nn.LSTMCell.initialize_carry(key, (2,), 5)
  params = nn.LSTMCell().init(key, carry, x)['params']
  modern = nn.LSTMCell(features=5)  # today's form, unchanged
  carry2 = modern.initialize_carry(key, (2, 3))
  return params['hi']['kernel'].shape, carry2[0].shape

@case
def featureless_cell_today_carry():
  return nn.LSTMCell().initialize_carry(key, (2, 3))

@case
def frozen_variables():
  variables = nn.Dense(3).init(key, x)
  plain = variables.unfreeze()
  rest, params = variables.pop('params')
  bn = nn.BatchNorm(use_running_average=False)
  bn_vars = bn.init(key, x)
  _, state = bn.apply(bn_vars, x, mutable=['batch_stats'])
  return (type(variables).__name__, type(plain).__name__, dict(rest),
          sorted(params), type(state).__name__)

@case
def param_override():
  class StdConv(nn.Conv):  # weight standardisation, flax 0.3 style
    def param(self, name, init_fn, shape):
      p = super().param(name, init_fn, shape)
      if name == 'kernel':
        p = p - jnp.mean(p, axis=(0, 1, 2))
      return p
  inputs = jnp.sin(jnp.arange(50.)).reshape(1, 5, 5, 2)
  conv = StdConv(4, (3, 3))
  variables = conv.init(key, inputs)
  y = conv.apply(variables, inputs)
  k = variables['params']['kernel']
  plain = nn.Conv(4, (3, 3)).apply(
      {'params': {'kernel': k - jnp.mean(k, axis=(0, 1, 2)),
                  'bias': variables['params']['bias']}}, inputs)
  return k.shape, bool(jnp.allclose(y, plain, rtol=1e-6, atol=1e-6))

@case
def attention_positional_mask():
  q = jnp.sin(jnp.arange(32.)).reshape(2, 4, 4)
  kv = jnp.cos(jnp.arange(40.)).reshape(2, 5, 4)
  mask = nn.make_attention_mask(jnp.ones((2, 4)), jnp.arange(5) < 3)
  attention = nn.MultiHeadDotProductAttention(num_heads=2)
  variables = attention.init(key, q, kv, mask)
  positional = attention.apply(variables, q, kv, mask)
  keyword = attention.apply(variables, q, kv, mask=mask)
  unmasked = attention.apply(variables, q, kv)
  with_det = attention.apply(variables, q, kv, mask, True)
  return (bool(jnp.array_equal(positional, keyword)),
          bool(jnp.array_equal(with_det, keyword)),
          bool(jnp.allclose(positional, unmasked)))

@case
def early_stopping_tuple():
  stop = early_stopping.EarlyStopping(min_delta=0.1, patience=0)
  improved, stop = stop.update(1.0)
  improved2, stop = stop.update(1.05)
  stop = stop.update(0.5)  # today's form, unchanged
  return improved, improved2, stop.best_metric, stop.has_improved

@case
def xla_client():
  from jax.lib import xla_client
  return (isinstance(jax.devices()[0], xla_client.Device),
          jax.lib.xla_client is xla_client)

@case
def arange_of_one_element_array():
  return (np.arange(np.array([4])).tolist(),
          np.arange(0, np.array([[5.]]), 2).tolist())

@case
def remat_concrete_false():
  # flaxformer: functools.partial(jax.remat, concrete=concrete, ...)
  remat = functools.partial(jax.remat, concrete=False, prevent_cse=True)
  return float(remat(lambda v: v * 2)(3.)), float(
      jax.checkpoint(jnp.sin, concrete=False)(0.))

@case
def uint32_minus_one():
  # flaxformer's decode cache index starts at -1 and wraps to 0
  index = jnp.array(-1, dtype=jnp.uint32)
  return int(index), int(index + 1), jnp.asarray([-1, 300], jnp.uint8).tolist()

@case
def sharding_names():
  from jax.interpreters import sharded_jit
  from jax.experimental.pjit import with_sharding_constraint
  return (sharded_jit.PartitionSpec('data', None, 'model') ==
          jax.sharding.PartitionSpec('data', None, 'model'),
          with_sharding_constraint is jax.lax.with_sharding_constraint)

@case
def xla_client_padding_type():
  xc = jax.lib.xla_client  # scenic's masked layers
  mapping = {'VALID': xc.PaddingType.VALID, 'SAME': xc.PaddingType.SAME}
  return mapping['SAME'] == xc.PaddingType.SAME, xc.PaddingType.VALID.value

@case
def conv_lstm_name():
  carry = nn.ConvLSTM.initialize_carry(key, (1,), (3, 3, 2))
  inputs = jnp.ones((1, 3, 3, 2))
  class Net(nn.Module):
    @nn.compact
    def __call__(self, carry, x):
      return nn.ConvLSTM(2, (2, 2))(carry, x)
  return sorted(Net().init(key, carry, inputs)['params'])
'''

EARLY_LINEN_ENVS = ('FLAXLEGACY_LINEN_KEYS', 'FLAXLEGACY_INITIALIZERS',
                    'FLAXLEGACY_PARAM_OVERRIDE', 'FLAXLEGACY_CARRIES',
                    'FLAXLEGACY_ATTENTION', 'FLAXLEGACY_EARLY_STOPPING',
                    'FLAXLEGACY_GROUP_NORM',
                    'FLAXLEGACY_FROZENDICT', 'FLAXLEGACY_SCALARS',
                    'FLAXLEGACY_ARGUMENTS')
# Mixed 2021 code: flax.nn for initializers / activations beside linen.
LEGACY_IMPORT = 'from flax import nn as legacy_nn'


def _results(proc):
  out = {}
  for line in proc.stdout.splitlines():
    name, sep, result = line.partition(': ')
    if sep:
      out[name] = result
  return out


@pytest.fixture(scope='module')
def runs():
  script = PATTERNS.replace('LEGACY', LEGACY_IMPORT)
  return {
      'legacy': _results(run_python(script)),
      'opted out': _results(run_python(
          script, env={e: 'modern' for e in EARLY_LINEN_ENVS})),
      'modern': _results(run_python(PATTERNS.replace('LEGACY', ''))),
  }


def _today(runs, name):
  """The opted-out and the modern process give the same result (today's)."""
  assert runs['opted out'][name] == runs['modern'][name]
  return runs['modern'][name]


def test_two_argument_initializer(runs):
  assert runs['legacy']['two_arg_initializer'] == '(dtype(\'complex64\'), True)'
  assert _today(runs, 'two_arg_initializer') == (
      'TypeError: cplx_init() takes 2 positional arguments but 3 were given')


def test_partial_initializer_with_dtype(runs):
  assert runs['legacy']['partial_with_dtype'] == "(dtype('complex64'), True)"
  assert _today(runs, 'partial_with_dtype') == (
      "TypeError: variance_scaling.<locals>.init() got multiple values for "
      "argument 'dtype'")


def test_initializer_stating_its_dtype(runs):
  assert runs['legacy']['initializer_stating_its_dtype'] == (
      "(dtype('complex64'), True, dtype(bfloat16), dtype('float32'))")
  # today the layer's param_dtype wins: a real kernel, silently
  assert _today(runs, 'initializer_stating_its_dtype') == (
      "(dtype('float32'), False, dtype(bfloat16), dtype('float32'))")


def test_static_initialize_carry(runs):
  assert runs['legacy']['static_initialize_carry'] == (
      '((2, 5), 0.0, True, True, (2, 4, 4, 3))')
  assert _today(runs, 'static_initialize_carry') == (
      "TypeError: 'int' object is not subscriptable")


def test_cell_without_features(runs):
  assert runs['legacy']['cell_without_features'] == '((5, 5), (2, 5))'
  # (the carry above already fails today)
  assert _today(runs, 'cell_without_features') == (
      "TypeError: 'int' object is not subscriptable")


def test_featureless_cell_and_todays_initialize_carry(runs):
  # the one thing a cell without features cannot do: a clear error
  assert runs['legacy']['featureless_cell_today_carry'] == (
      'TypeError: LSTMCell.initialize_carry(rng, input_shape) needs '
      'features: this cell was built without it (flax 0.3 style, hidden size '
      'from the carry). Pass features=..., or call flax 0.3\'s '
      'LSTMCell.initialize_carry(rng, batch_dims, size) on the class.')
  assert _today(runs, 'featureless_cell_today_carry') == (
      "TypeError: LSTMCell.__init__() missing 1 required positional "
      "argument: 'features'")


def test_init_returns_a_frozen_dict(runs):
  assert runs['legacy']['frozen_variables'] == (
      "('FrozenDict', 'dict', {}, ['bias', 'kernel'], 'FrozenDict')")
  assert _today(runs, 'frozen_variables') == (
      "AttributeError: 'dict' object has no attribute 'unfreeze'")


def test_param_override_without_param_dtype(runs):
  assert runs['legacy']['param_override'] == '((3, 3, 2, 4), True)'
  assert _today(runs, 'param_override') == (
      'TypeError: param_override.<locals>.StdConv.param() takes 4 positional '
      'arguments but 5 were given')


def test_attention_mask_as_third_positional_argument(runs):
  # Masked as with mask=..., and the mask matters.
  assert runs['legacy']['attention_positional_mask'] == '(True, True, False)'
  # today the mask is taken as inputs_v, one axis more than the keys
  assert _today(runs, 'attention_positional_mask') == (
      'AssertionError: q, k, v must have same rank.')


def test_early_stopping_update_unpacks(runs):
  assert runs['legacy']['early_stopping_tuple'] == '(True, False, 0.5, True)'
  assert _today(runs, 'early_stopping_tuple') == (
      'TypeError: cannot unpack non-iterable EarlyStopping object')


def test_removed_jax_lib_xla_client(runs):
  # A removed module path: served whenever it is imported (as xla_bridge).
  assert runs['legacy']['xla_client'] == '(True, True)'
  assert runs['modern']['xla_client'] == '(True, True)'


def test_arange_of_a_one_element_array(runs):
  assert runs['legacy']['arange_of_one_element_array'] == (
      '([0, 1, 2, 3], [0.0, 2.0, 4.0])')
  assert _today(runs, 'arange_of_one_element_array') == (
      'TypeError: only 0-dimensional arrays can be converted to Python '
      'scalars')


def test_remat_with_concrete_false(runs):
  assert runs['legacy']['remat_concrete_false'] == '(6.0, 0.0)'
  assert _today(runs, 'remat_concrete_false').startswith(
      'NotImplementedError: The `concrete` option to `jax.checkpoint` was '
      'deprecated in JAX v0.8.2, and removed in JAX v0.10')


def test_out_of_range_integer_wraps_as_numpy_1_did(runs):
  assert runs['legacy']['uint32_minus_one'] == '(4294967295, 0, [255, 44])'
  assert _today(runs, 'uint32_minus_one') == (
      'OverflowError: Python integer -1 out of bounds for uint32')


def test_removed_sharding_names(runs):
  # removed names: served on first access / import even without activation
  for run in ('legacy', 'opted out', 'modern'):
    assert runs[run]['sharding_names'] == '(True, True)'


def test_xla_client_padding_type(runs):
  # (the served module, imported by the case above, is the attribute too)
  for run in ('legacy', 'opted out', 'modern'):
    assert runs[run]['xla_client_padding_type'] == '(True, 1)'


def test_conv_lstm_keeps_its_flax_0_3_name(runs):
  assert runs['legacy']['conv_lstm_name'] == "['ConvLSTM_0']"
  assert runs['modern']['conv_lstm_name'] == (
      "AttributeError: module 'flax.linen' has no attribute 'ConvLSTM'")


# --- parameter keys: numbers of flax 0.3.6 linen ----------------------------

KEYS = '''
import json, sys
LEGACY
sys.path.insert(0, DATA)
import models
arrays = models.record()
print(json.dumps({k: [v.dtype.str, list(v.shape), v.ravel().tolist()]
                  for k, v in arrays.items()}))
'''


def _record(env=None):
  script = KEYS.replace('LEGACY', LEGACY_IMPORT).replace('DATA', repr(DATA))
  proc = run_python(script, env=env)
  got = json.loads(proc.stdout.splitlines()[-1])
  return {k: np.array(v, dtype=np.dtype(d)).reshape(s)
          for k, (d, s, v) in got.items()}


def _flax036():
  with open(os.path.join(DATA, 'flax036.json')) as f:
    data = json.load(f)
  assert data['flax'] == '0.3.6'
  return {k: np.array([float(x) for x in v['values']],
                      np.dtype(v['dtype'])).reshape(v['shape'])
          for k, v in data['arrays'].items()}


def _mismatches(got, want):
  bad = sorted(set(got) ^ set(want))
  for k in sorted(set(got) & set(want)):
    # Initial values come from the same threefry bits: exact.  Outputs
    # (and BatchNorm statistics) are float32 arithmetic of a few terms on
    # another XLA build: within 1e-5 (measured: at most 2e-7 here).
    exact = ':params/' in k
    if got[k].shape != want[k].shape or not (
        np.array_equal(got[k], want[k]) if exact else
        np.allclose(got[k], want[k], rtol=1e-5, atol=1e-6)):
      bad.append(k)
  return bad


def test_parameter_keys_are_flax_0_3_6s():
  want = _flax036()
  assert len(want) == 120  # 13 models: compact, setup, shared, nested,
  # dropout and own streams, BatchNorm, scan (a decorated method, a cell
  # class, layers with split keys), vmap, cells, attention, Embed
  assert _mismatches(_record(), want) == []


def test_parameter_keys_opt_out_gives_todays_numbers():
  want = _flax036()
  bad = _mismatches(_record({'FLAXLEGACY_LINEN_KEYS': 'modern'}), want)
  # every parameter drawn from a key differs (zeros / ones do not)
  assert 'mlp:params/Dense_0/kernel' in bad and 'setup:params/w' in bad
  assert 'mlp:params/Dense_0/bias' not in bad


# --- initializers stating their dtype, under x64: flax 0.3.6's numbers --------

X64 = '''
import json, sys
LEGACY
sys.path.insert(0, DATA)
import stated_dtypes
try:
  arrays = stated_dtypes.record()
except TypeError as e:
  print(json.dumps(str(e).splitlines()[0]))
else:
  print(json.dumps({k: [v.dtype.str, list(v.shape),
                        [[z.real, z.imag] for z in v.ravel().tolist()]
                        if v.dtype.kind == 'c' else v.ravel().tolist()]
                    for k, v in arrays.items()}))
'''


def _decode(dtype, shape, values):
  if np.dtype(dtype).kind == 'c':
    values = [complex(float(re), float(im)) for re, im in values]
  else:
    values = [float(v) for v in values]
  return np.array(values, np.dtype(dtype)).reshape(shape)


def _record_x64(env=None):
  script = X64.replace('LEGACY', LEGACY_IMPORT).replace('DATA', repr(DATA))
  got = json.loads(run_python(script, env=env).stdout.splitlines()[-1])
  if isinstance(got, str):
    return got
  return {k: _decode(d, s, v) for k, (d, s, v) in got.items()}


def test_initializers_stating_float64_keep_it_as_in_flax_0_3_6():
  # jVMC's RBM: lecun_normal(dtype=np.float64) under x64, updated with
  # jax.lax.add and a float64 step (flax 0.3.6 on the oracle:
  # tests/early_linen/flax036_x64.json, by record_flax036.py)
  with open(os.path.join(DATA, 'flax036_x64.json')) as f:
    data = json.load(f)
  assert data['flax'] == '0.3.6'
  want = {k: _decode(v['dtype'], v['shape'], v['values'])
          for k, v in data['arrays'].items()}
  assert len(want) == 12
  assert want['rbm:params/Dense_0/kernel'].dtype == np.float64
  assert want['cpx_dense:params/Dense_0/kernel'].dtype == np.complex128
  got = _record_x64()
  assert {k: v.dtype for k, v in got.items()} == {
      k: v.dtype for k, v in want.items()}
  assert _mismatches(got, want) == []
  # the row opted out: today's linen, where the bias partial raises first
  # (with it served but the kernel's dtype not, the kernel was float32 and
  # the library's update raised 'lax.add requires arguments to have the
  # same dtypes, got float32, float64'; initializer_stating_its_dtype shows
  # today's float32 kernel)
  assert _record_x64({'FLAXLEGACY_INITIALIZERS': 'modern'}) == (
      "zeros() got multiple values for argument 'dtype'")


# --- a modern process is untouched --------------------------------------------


def test_modern_process_gets_todays_linen():
  proc = run_python('''
      import sys, numpy as np
      from flax import linen as nn, config
      from flax.core import scope
      from flax.training import early_stopping
      import jax, jax.numpy as jnp
      patched = [scope.LazyRng.create, scope.Scope.param,
                 nn.Module._call_wrapped_method, nn.Module.param,
                 nn.MultiHeadDotProductAttention.__call__, np.arange,
                 nn.LSTMCell.__init__, jax.remat, jax.checkpoint, jnp.array,
                 jnp.asarray, nn.GroupNorm.__call__]
      print([hasattr(f, '_flaxlegacy_modern') for f in patched],
            type(nn.LSTMCell.__dict__['initialize_carry']).__name__,
            hasattr(early_stopping.EarlyStopping, '__iter__'),
            'param' in vars(nn.GroupNorm),
            config.flax_return_frozendict, hasattr(nn, 'ConvLSTM'),
            'flaxlegacy._activate' in sys.modules)
  ''')
  assert proc.stdout.split('\n')[0] == (
      '[False, False, False, False, False, False, False, False, False, '
      'False, False, False] function False False False False False')


# --- flaxlegacy check ------------------------------------------------------------

CHECKED = '''\
import functools
import numpy as np
import jax
import jax.numpy as jnp
from jax.lib import xla_client
import flax.linen as nn
from flax import nn as legacy_nn
from flax.training import early_stopping


def cplx_init(rng, shape):
  return jax.random.normal(rng, shape) + 0j

cinit = functools.partial(jax.nn.initializers.normal(), dtype=jnp.complex64)


class StdConv(nn.Conv):
  def param(self, name, init_fn, shape):
    return super().param(name, init_fn, shape)


class Model(nn.Module):
  def setup(self):
    self.attn = nn.MultiHeadDotProductAttention(num_heads=2)

  @nn.compact
  def __call__(self, x, mask):
    x = nn.Dense(3, kernel_init=cplx_init)(x)
    x = nn.Dense(3, kernel_init=cinit, bias_init=nn.initializers.zeros)(x)
    carry = nn.LSTMCell.initialize_carry(jax.random.PRNGKey(0), (2,), 3)
    carry, y = nn.LSTMCell()(carry, x)
    y = self.attn(x, x, mask) + nn.SelfAttention(num_heads=2)(x, mask)
    cell = nn.ConvLSTM(3, (3, 3))
    return xla_client.Device, xla_client.ops, np.arange(np.array([31]))


variables = Model().init(jax.random.PRNGKey(0), jnp.ones((2, 3)), None)
state, params = variables.pop('params')
params = params.unfreeze()
stop = early_stopping.EarlyStopping()
improved, stop = stop.update(1.)
modern = nn.LSTMCell(features=3).initialize_carry(jax.random.PRNGKey(0), (2, 3))
remat = functools.partial(jax.remat, concrete=False, prevent_cse=True)
index = jnp.array(-1, dtype=jnp.uint32)
fails = jax.checkpoint(jnp.sin, concrete=True)
'''


def test_check_names_each_early_linen_pattern_and_whether_served():
  from flaxlegacy.migrate import check  # pylint: disable=g-import-not-at-top
  found = [(f.line, f.name, f.status)
           for f in check.scan_source(CHECKED, 'model.py')
           if not f.name.startswith(('flax.nn', 'jax.lib.xla_client:'))]
  s, u = check.SUPPORTED, check.UNSUPPORTED
  assert found == [
      (5, 'jax.lib.xla_client', s),
      (6, 'early linen: linen parameter keys', s),
      (18, 'early linen: param override without param_dtype '
           '[StdConv.param]', s),
      (28, 'early linen: initializer without dtype '
           '[Dense(kernel_init=cplx_init)]', s),
      (29, 'early linen: initializer partial binding dtype '
           '[Dense(kernel_init=partial(..., dtype=...))]', s),
      (30, 'early linen: initialize_carry(rng, batch_dims, size) '
           '[LSTMCell.initialize_carry]', s),
      (31, 'early linen: cell without features [LSTMCell()]', s),
      (32, 'early linen: attention mask as third positional argument '
           '[self.attn(inputs_q, inputs_kv, mask)]', s),
      (33, 'flax.linen.ConvLSTM', s),
      (34, 'jax.lib.xla_client', s),
      (34, 'jax.lib.xla_client.ops', u),  # the XlaBuilder API is gone
      (34, 'legacy NumPy: numpy.arange(one-element array)', s),
      (38, 'early linen: FrozenDict.pop(key) -> (rest, value)', s),
      (39, 'early linen: FrozenDict.unfreeze()', s),
      (41, 'early linen: EarlyStopping.update -> (has_improved, state)', s),
      (43, 'legacy JAX: jax.remat(concrete=False)', s),
      (44, 'legacy JAX: jnp.array(negative integer, unsigned dtype)', s),
      (45, 'jax.remat(concrete=True)', u),  # no equivalent today
  ]
  notes = {f.name: f.note for f in check.scan_source(CHECKED, 'model.py')}
  assert notes['early linen: cell without features [LSTMCell()]'] == (
      'flax 0.3 behaviour served in legacy processes (carries; '
      'FLAXLEGACY_CARRIES=modern turns it off)')


def test_check_reports_nothing_for_todays_linen():
  from flaxlegacy.migrate import check  # pylint: disable=g-import-not-at-top
  source = textwrap.dedent('''\
      import jax
      from flax import linen as nn
      cell = nn.LSTMCell(features=3)
      carry = cell.initialize_carry(jax.random.PRNGKey(0), (2, 3))
      variables = nn.Dense(3).init(jax.random.PRNGKey(0), jax.numpy.ones(2))
      params = variables['params']
  ''')
  assert check.scan_source(source, 'train.py') == []


def test_check_names_an_initializer_stating_its_dtype():
  from flaxlegacy.migrate import check  # pylint: disable=g-import-not-at-top
  source = textwrap.dedent('''\
      import jax
      import numpy as np
      from flax import linen as nn
      real = jax.nn.initializers.lecun_normal(dtype=np.float64)
      a = nn.Dense(3, dtype=np.float64, kernel_init=real)
      b = nn.Dense(3, kernel_init=nn.initializers.normal(0.1, dtype=np.complex64))
      c = nn.Dense(3, kernel_init=real, param_dtype=np.float64)  # today's form
      d = nn.Dense(3, kernel_init=jax.nn.initializers.lecun_normal())
  ''')
  found = [(f.line, f.name, f.status)
           for f in check.scan_source(source, 'nets.py')]
  # (no 'linen parameter keys': code written for today's linen may do this)
  assert found == [
      (5, 'early linen: initializer stating its dtype '
          '[Dense(kernel_init=...(dtype=...))]', check.SUPPORTED),
      (6, 'early linen: initializer stating its dtype '
          '[Dense(kernel_init=...(dtype=...))]', check.SUPPORTED),
  ]
