"""The legacy flax.nn module system: frames, naming, keys, Model, Collection,
stateful, stochastic, JAX transformations and the legacy error catalogue
(spec legacy-nn.md sections 1-2).  Numbers are checked against values
verified on the real legacy code (spec 2.5 test vectors)."""

import dataclasses
import re
import sys
import threading
import warnings

from flax import serialization
import jax
from jax import random
import jax.numpy as jnp
import numpy as np
import pytest

from flaxlegacy import nn
from flaxlegacy.nn import base
from flaxlegacy.nn import utils

K0 = random.PRNGKey(0)
F = base._fold_in_str  # pylint: disable=protected-access


def _eq(a, b):
  np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _key_init(key, shape):
  """An initializer that stores the key it is given (to observe keys)."""
  del shape
  return key


def _ones(key, shape):
  del key
  return jnp.ones(shape, jnp.float32)


class Dummy(nn.Module):

  def apply(self, x):
    return x + self.param('bias', x.shape, _ones)


class KeyParam(nn.Module):
  """Stores the key of its param 'p' as the param value."""

  def apply(self):
    return self.param('p', (2,), _key_init)


class Empty(nn.Module):

  def apply(self, x):
    return x


# --- CallStack, classproperty ---------------------------------------------------


def test_call_stack_push_pop_order_and_error_path():
  stack = utils.CallStack()
  assert not stack and len(stack) == 0
  with stack.frame('a'):
    with stack.frame() as b:
      assert b == {} and stack[-1] is b and list(stack) == ['a', b]
    assert list(stack) == ['a']
  with pytest.raises(RuntimeError):
    with stack.frame('c'):
      raise RuntimeError()
  assert not stack


def test_call_stack_is_per_thread():
  stack = utils.CallStack()
  seen = []
  with stack.frame('main'):
    t = threading.Thread(target=lambda: seen.append(len(stack)))
    t.start()
    t.join()
    assert len(stack) == 1
  assert seen == [0]


def test_classproperty_on_class_and_instance():

  class A:
    name = utils.classproperty(lambda cls: cls.__name__)

  class B(A):
    pass

  assert (A.name, B.name, B().name) == ('A', 'B', 'B')


# --- PRNG: string folding (spec 2.5 test vectors) ----------------------------------

FOLD_VECTORS = [
    ('kernel', [222416829, 1816268113]),
    ('bias', [414100511, 4033189662]),
    ('Dense_0', [1586431120, 1235817813]),
    ('0', [2087800240, 116545052]),
    ('dummy', [418025628, 2073738197]),
    ('embedding', [1606641235, 2283046295]),
    ('scale', [2876779651, 1592749752]),
    ('bn', [3594087660, 2540769394]),
    ('\u00fc', [1083366467, 4186817651]),
]


@pytest.mark.parametrize('name,expected', FOLD_VECTORS,
                         ids=[v[0] for v in FOLD_VECTORS])
def test_fold_in_str_vectors(name, expected):
  _eq(F(K0, name), np.array(expected, np.uint32))


def test_fold_in_str_nested_and_typed_keys():
  _eq(F(F(K0, 'Dense_0'), 'kernel'), np.array([769651625, 578174982],
                                              np.uint32))
  _eq(F(random.PRNGKey(1), 'kernel'),
      np.array([1942337759, 3303384948], np.uint32))
  typed = F(random.key(0), 'kernel')
  _eq(random.key_data(typed), np.array([222416829, 1816268113], np.uint32))


# --- naming and the parameter tree --------------------------------------------------


class Naming(nn.Module):

  def apply(self, x):
    Dummy(x)
    Empty(x)
    shared = Dummy.shared()
    Dummy(x)
    shared(x)
    shared(x)
    Dummy.partial()(x)
    Dummy(x, name='explicit')
    return x


def test_one_counter_per_frame_shared_across_classes():
  _, params = Naming.init(K0, jnp.ones((1,)))
  assert sorted(params) == sorted(
      ['Dummy_0', 'Empty_1', '2', 'Dummy_3', 'Dummy_4', 'explicit'])
  assert params['Empty_1'] == {}  # children without params keep an entry


def test_naming_example_with_real_layers():
  """spec 2.4 verified example: Dense_0, Conv_1, '2', Dense_3, ..."""

  class M(nn.Module):

    def apply(self, x):
      nn.Dense(x, 3)
      h = nn.Conv(x[:, :, None], 4, (1,))
      s = nn.Dense.shared(features=2)
      nn.Dense(h, 5)
      s(h)
      s(h)
      nn.SelfAttention(h, num_heads=1)
      return nn.Dense.partial(features=2)(h)

  _, params = M.init(K0, jnp.ones((1, 3)))
  # (dict order is creation order: the shared '2' is created at its call)
  assert list(params) == ['Dense_0', 'Conv_1', 'Dense_3', '2',
                          'MultiHeadDotProductAttention_4', 'Dense_5']


def test_counters_restart_per_invocation():

  class Outer(nn.Module):

    def apply(self, x):
      return Naming(Naming(x))

  _, params = Outer.init(K0, jnp.ones((1,)))
  assert list(params) == ['Naming_0', 'Naming_1']
  assert params['Naming_0'].keys() == params['Naming_1'].keys()


def test_names_of_partial_module_and_method_classes():
  assert Dummy.partial(x=1).__name__ == 'Dummy'
  assert Dummy.partial(x=1).__qualname__ == Dummy.__qualname__

  @nn.module
  def Act(x):  # pylint: disable=invalid-name
    return jax.nn.relu(x)

  class Uses(nn.Module):

    def apply(self, x):
      return Act(x)

  assert issubclass(Act, nn.Module) and Act.__name__ == 'Act'
  _, params = Uses.init(K0, jnp.ones((1,)))
  assert params == {'Act_0': {}}


# --- keys ----------------------------------------------------------------------------


def test_param_and_child_keys_are_name_folds():

  class M(nn.Module):

    def apply(self):
      KeyParam(name='a')
      KeyParam()
      return self.param('own', (2,), _key_init)

  _, params = M.init(K0, name='root_name_is_not_folded')
  _eq(params['own'], F(K0, 'own'))
  _eq(params['a']['p'], F(F(K0, 'a'), 'p'))
  _eq(params['KeyParam_0']['p'], F(F(K0, 'KeyParam_0'), 'p'))


def test_shared_module_key_uses_construction_frame():

  class User(nn.Module):

    def apply(self, layer):
      return layer()

  class M(nn.Module):

    def apply(self):
      shared = KeyParam.shared(name='s')
      User(shared)
      return shared()

  _, params = M.init(K0)
  assert params['User_0'] == {}
  _eq(params['s']['p'], F(F(K0, 's'), 'p'))


def test_state_initializer_splits_the_frame_key():

  class Stat(nn.Module):

    def apply(self):
      self.state('mean', (2,), _ones)
      return self.param('p', (2,), _key_init)

  with nn.stateful() as state:
    _, params = Stat.init(K0)
  _eq(params['p'], F(random.split(K0)[0], 'p'))
  _eq(state.as_dict()['/']['mean'], np.ones(2))
  with pytest.raises(ValueError, match='stateful context manager'):
    Stat.init(K0)


def test_state_without_initializer_keeps_key():

  class Stat(nn.Module):

    def apply(self):
      self.state('mean', collection=nn.Collection())
      return self.param('p', (2,), _key_init)

  _, params = Stat.init(K0)
  _eq(params['p'], F(K0, 'p'))


def test_shared_stateful_module_splits_parent_key_from_second_call():
  flags = []

  class Stat(nn.Module):

    def apply(self):
      flags.append(self.is_initializing())
      self.state('v', (2,), _ones)
      return 0

  class M(nn.Module):

    def apply(self):
      s = Stat.shared(name='s')
      for _ in range(3):
        s()
      return self.param('after', (2,), _key_init)

  with nn.stateful():
    _, params = M.init(K0)
  key = K0
  for _ in range(2):  # calls 2 and 3 split the parent's key
    key = random.split(key)[0]
  _eq(params['after'], F(key, 'after'))
  assert flags == [True, False, False]


# --- stochastic ------------------------------------------------------------------------


def test_make_rng_counter_and_nesting():
  with nn.stochastic(K0):
    assert nn.is_stochastic()
    r1 = nn.make_rng()
    with nn.stochastic(random.PRNGKey(5)):
      inner = nn.make_rng()
    r2 = nn.make_rng()
  assert not nn.is_stochastic()
  _eq(r1, [928981903, 3453687069])
  _eq(r2, [4146024105, 2718843009])
  _eq(inner, random.fold_in(random.PRNGKey(5), 1))


def test_init_by_shape_consumes_one_make_rng():

  class R(nn.Module):

    def apply(self, x):
      del x
      return nn.make_rng()

  with nn.stochastic(K0):
    y, _ = R.init_by_shape(random.PRNGKey(1), [(2,)])
    after = nn.make_rng()
  _eq(y, random.fold_in(random.fold_in(K0, 1), 1))
  _eq(after, random.fold_in(K0, 2))


def test_dropout():
  x = jnp.ones((8,))
  assert nn.dropout(x, 0.) is x
  assert nn.dropout(x, 0.5, deterministic=True) is x
  with nn.stochastic(K0):
    y = nn.dropout(x, 0.5)
  _eq(y, [0, 2, 0, 0, 0, 0, 0, 2])  # spec 2.5, legacy PRNG stream
  y = nn.dropout(x, 0.5, rng=random.fold_in(K0, 1))
  _eq(y, [0, 2, 0, 0, 0, 0, 0, 2])


# --- entry points -----------------------------------------------------------------------


def test_init_call_and_init_by_shape_agree():

  class M(nn.Module):

    def apply(self, x):
      return nn.Dense(Dummy(x), 3)

  x = jnp.ones((2, 4))
  y, params = M.init(K0, x)
  y2, params2 = M.init_by_shape(K0, [((2, 4), jnp.float32)])
  y3, params3 = M.init_by_shape(K0, [(2, 4)])  # bare shape: float32
  for p in (params2, params3):
    jax.tree_util.tree_map(_eq, params, p)
    assert all(isinstance(l, jax.Array) for l in jax.tree_util.tree_leaves(p))
  assert y2 == jax.ShapeDtypeStruct((2, 3), jnp.float32) == y3
  _eq(M.call(params, x), y)


def test_init_by_shape_keeps_extra_args_and_int_specs():

  class M(nn.Module):

    def apply(self, ids, scale, offset=0.):
      table = self.param('t', (5, 2), _ones)
      return table[ids] * scale + offset

  y, params = M.init_by_shape(K0, [((3,), jnp.int32)], 2., offset=1.)
  assert y == jax.ShapeDtypeStruct((3, 2), jnp.float32)
  _eq(params['t'], np.ones((5, 2)))


def test_create_warns_and_returns_model():
  x = jnp.ones((1,))
  with pytest.warns(DeprecationWarning, match=r'`create\(\)` will be removed'):
    y, model = Dummy.create(K0, x)
  assert isinstance(model, nn.Model) and model.module is Dummy
  _eq(y, [2.])
  with pytest.warns(DeprecationWarning,
                    match=r'`create_by_shape\(\)` will be removed'):
    _, model2 = Dummy.create_by_shape(K0, [(1,)])
  jax.tree_util.tree_map(_eq, model.params, model2.params)


def test_no_warning_on_ordinary_use():
  with warnings.catch_warnings():
    warnings.simplefilter('error')
    _, params = Naming.init(K0, jnp.ones((1,)))
    nn.Model(Naming, params)(jnp.ones((1,)))


def test_partial_kwargs_merge_and_name():

  class Args(nn.Module):

    def apply(self, a=0, b=0, c=0):
      return (a, b, c)

  inner = Args.partial(a=1, b=1)
  outer = inner.partial(b=2, name='fixed')
  y, _ = outer.init(K0, c=3)
  assert y == (1, 2, 3)
  y, _ = outer.init(K0, a=9)
  assert y == (9, 2, 0)

  class Uses(nn.Module):

    def apply(self):
      return outer()

  _, params = Uses.init(K0)
  assert list(params) == ['fixed']


def test_module_method_shares_params_and_gets_partial_kwargs():

  class MM(nn.Module):

    def apply(self, x, k=1):
      return x + self.param('bias', x.shape, _ones) * k

    @nn.module_method
    def other(self, x, **kw):
      return self.get_param('bias') * 10 + x, kw

  assert MM.other.__qualname__.endswith('MM.other')
  assert MM.other is MM.other  # cached per reading class
  partial = MM.partial(k=2)
  _, params = partial.init(K0, jnp.ones((1,)))
  model = nn.Model(partial, params)
  y, kw = model.other(jnp.ones((1,)))
  _eq(y, [11.])
  assert kw == {'k': 2}

  class UsesShared(nn.Module):

    def apply(self, x):
      layer = MM.shared(name='mm')
      layer(x)
      return layer.other(x)[0]

  y, params = UsesShared.init(K0, jnp.ones((1,)))
  assert list(params) == ['mm']
  _eq(y, [11.])


def test_module_signature_and_doc_follow_apply():
  import inspect  # pylint: disable=g-import-not-at-top

  class Doc(nn.Module):

    def apply(self, x, features, bias=True):
      """Apply doc."""
      return x

  assert str(inspect.signature(Doc)) == '(x, features, bias=True)'
  assert Doc.__doc__ == 'Apply doc.'


def test_is_initializing_inside_call_is_false():
  seen = []

  class M(nn.Module):

    def apply(self, x):
      seen.append(self.is_initializing())
      return Dummy(x)

  _, params = M.init(K0, jnp.ones((1,)))
  M.call(params, jnp.ones((1,)))
  assert seen == [True, False]


# --- transparent / truncated ----------------------------------------------------------


class TwoLevel(nn.Module):

  def apply(self, x):
    h = Dummy(x, name='a')
    return Dummy(h, name='b')


def test_truncate_at_paths_and_pytrees():
  x = jnp.ones((1,))
  _, params = TwoLevel.init(K0, x)
  model = nn.Model(TwoLevel, params)
  truncated = model.truncate_at('/a')
  assert truncated.params is params
  _eq(truncated(x)[0], [2.])
  out = model.truncate_at({'p': '/a', 'q': ['/b', '/']})(x)
  _eq(out['p'][0], [2.])
  _eq(out['q'][0][0], [3.])
  _eq(out['q'][1][0], [3.])
  with pytest.raises(KeyError):
    model.truncate_at('/missing')(x)


def test_transparent_post_processing_errors():

  class T(base.TransparentModule):

    def apply(self, x, n=1, name_child=None):
      for _ in range(n):
        Dummy(x, name=name_child)
      return x

  x = jnp.ones((1,))
  _, params = T.init(K0, x, name_child='0')
  assert list(params) == ['bias']
  with pytest.raises(ValueError, match=re.escape(
      'Transparent modules should have exactly one child.')):
    T.init(K0, x, n=0)
  with pytest.raises(ValueError, match=re.escape(
      'Transparent modules should contain an unnamed child.')):
    T.init(K0, x, name_child='other')


# --- capture_module_outputs ------------------------------------------------------------


def test_capture_module_outputs_paths_and_nested_model():
  x = jnp.ones((1,))
  _, params = TwoLevel.init(K0, x)
  inner = nn.Model(TwoLevel, params)

  class Outer(nn.Module):

    def apply(self, x, model):
      return model(Dummy(x, name='d'), name='inner_model')

  _, outer_params = Outer.init(K0, x, inner)
  assert list(outer_params) == ['d']  # nested model adds nothing
  with nn.capture_module_outputs() as out:
    Outer.call(outer_params, x, inner)
  assert sorted(out.as_dict()) == ['/', '/d', '/inner_model',
                                   '/inner_model/a', '/inner_model/b']
  _eq(out['/inner_model/b'][0], [4.])


# --- Model ---------------------------------------------------------------------------


def test_model_is_a_pytree_of_params_only():
  _, params = TwoLevel.init(K0, jnp.ones((1,)))
  model = nn.Model(TwoLevel, params)
  leaves, treedef = jax.tree_util.tree_flatten(model)
  assert len(leaves) == 2
  assert jax.tree_util.tree_unflatten(treedef, leaves).module is TwoLevel
  doubled = jax.tree_util.tree_map(lambda p: 2 * p, model)
  assert isinstance(doubled, nn.Model)
  _eq(doubled.params['a']['bias'], [2.])
  other = nn.Model(TwoLevel.partial(), params)
  assert (jax.tree_util.tree_structure(other) !=
          jax.tree_util.tree_structure(model))


def test_model_under_jit_grad_vmap():
  x = jnp.ones((1,))
  _, params = TwoLevel.init(K0, x)
  model = nn.Model(TwoLevel, params)
  _eq(jax.jit(model)(x), [3.])
  _eq(jax.jit(lambda m, x: m(x))(model, x), [3.])
  grads = jax.grad(lambda m: jnp.sum(m(x)))(model)
  assert isinstance(grads, nn.Model)
  _eq(grads.params['b']['bias'], [1.])
  _eq(jax.vmap(model)(jnp.ones((3, 1))), np.full((3, 1), 3.))


def test_model_frozen_replace_hash_and_attributes():
  _, params = Dummy.init(K0, jnp.ones((1,)))
  model = nn.Model(Dummy, params)
  with pytest.raises(dataclasses.FrozenInstanceError):
    model.params = {}
  assert model.replace(params={'bias': 1}).params == {'bias': 1}
  assert hash(model) == id(model)
  assert nn.Model(None, params).module is None
  with pytest.raises(AttributeError, match=re.escape(
      'No attribute named "apply".')):
    model.apply  # pylint: disable=pointless-statement
  with pytest.raises(AttributeError):
    model.does_not_exist  # pylint: disable=pointless-statement


def test_model_serialization_state_dict():
  _, params = Dummy.init(K0, jnp.ones((1,)))
  model = nn.Model(Dummy, params)
  state = serialization.to_state_dict(model)
  assert list(state) == ['params'] and list(state['params']) == ['bias']
  restored = serialization.from_bytes(
      model, serialization.to_bytes(model.replace(params={'bias': 5 *
                                                          params['bias']})))
  _eq(restored.params['bias'], [5.])
  with pytest.raises(ValueError, match=re.escape(
      'Missing field params in state dict while restoring an instance of'
      ' Model')):
    serialization.from_state_dict(model, {})
  with pytest.raises(ValueError, match=re.escape(
      'Unknown field(s) "extra" in state dict while restoring an instance'
      ' of Model')):
    serialization.from_state_dict(model, {'params': state['params'],
                                          'extra': 1})


# --- Collection ----------------------------------------------------------------------


class Store(nn.Module):

  def apply(self, x, coll):
    previous = coll.retrieve()
    coll.store(x)
    return previous


def test_collection_store_retrieve_and_mutate():
  coll = nn.Collection()
  with coll.mutate() as c1:
    Store.init(K0, 1., c1, name='root')
  assert c1.as_dict() == {'/root': 1.} and coll.as_dict() == {}
  with c1.mutate() as c2:
    previous, _ = Store.init(K0, 2., c2, name='root')
  assert previous == 1. and c2['/root'] == 2. and c1['/root'] == 1.
  with pytest.raises(ValueError, match=re.escape(
      'Collection is not mutable. Use the `mutate` method to create a mutable'
      ' copy.')):
    Store.init(K0, 3., c2)


def test_collection_paths_relative_to_anchor():

  class Nested(nn.Module):

    def apply(self, x):
      with nn.Collection().mutate() as coll:
        Store(x, coll, name='a')
        Store(x, coll, name='b')
      return coll

  coll, _ = Nested.init(K0, 1., name='nested')
  assert sorted(coll.as_dict()) == ['/a', '/b']


def test_collection_root_rule():
  with nn.Collection().mutate() as coll:
    Store.init(K0, 1., coll, name='x')
    Store.init(K0, 1., coll, name='y')
  assert sorted(coll.as_dict()) == ['/x', '/y']
  with nn.Collection().mutate() as coll:
    Store.init(K0, 1., coll)
    with pytest.raises(ValueError, match=re.escape(
        'When multiple top-level module calls use a Collection each top-level'
        ' module should have a name.')):
      Store.init(K0, 1., coll)


def test_collection_pytree_and_serialization():
  coll = nn.Collection({'/a': {'m': jnp.ones(2)}, '/b': {'m': jnp.zeros(1)}})
  doubled = jax.tree_util.tree_map(lambda v: v * 2, coll)
  assert isinstance(doubled, nn.Collection)
  _eq(doubled['/a']['m'], [2., 2.])
  _eq(jax.jit(lambda c: c)(coll)['/b']['m'], [0.])
  restored = serialization.from_bytes(coll, serialization.to_bytes(doubled))
  assert isinstance(restored, nn.Collection)
  _eq(restored['/a']['m'], [2., 2.])
  with coll.mutate() as mutable:
    with pytest.raises(ValueError, match=re.escape(
        'A mutable collection should not be transformed by Jax.')):
      jax.jit(lambda c: c)(mutable)
    with pytest.raises(ValueError, match='mutable collection'):
      with mutable.mutate():
        pass


def test_stateful_modes():

  class Counter(nn.Module):

    def apply(self):
      count = self.state('count', (), lambda k, s: jnp.zeros(s))
      if not self.is_initializing():
        count.value = count.value + 1
      return count.value

  with nn.stateful() as state:
    _, params = Counter.init(K0)
  for expected in (1., 2.):
    with nn.stateful(state) as state:
      y = Counter.call(params)
    assert y == expected
  with nn.stateful(state, mutable=False) as frozen:
    assert frozen is state
    with pytest.raises(ValueError, match='Collection is not mutable'):
      Counter.call(params)
  assert state['/']['count'] == 2.  # the refused write left no trace


def test_get_state_and_is_stateful():
  assert not base.is_stateful() and not hasattr(nn, 'is_stateful')
  with nn.stateful() as state:
    assert base.is_stateful() and nn.get_state() is state


# --- JAX transformations (spec 2.15) ----------------------------------------------------


class Cell(nn.Module):

  def apply(self, carry, x):
    w = self.param('w', (3, 3), jax.nn.initializers.lecun_normal())
    carry = jnp.tanh(carry @ w + x)
    return carry, carry


class ScanModel(nn.Module):

  def apply(self, xs):
    cell = Cell.shared(name='cell')
    carry = jnp.zeros((2, 3))
    if self.is_initializing():
      cell(carry, xs[:, 0])
    _, ys = jax.lax.scan(cell, carry, jnp.swapaxes(xs, 0, 1))
    return ys


class ScanInit(nn.Module):
  """Parameters are created inside the scan body."""

  def apply(self, xs):
    from flax import jax_utils  # pylint: disable=g-import-not-at-top
    _, ys = jax_utils.scan_in_dim(Cell.partial(name='cell'),
                                  jnp.zeros((2, 3)), xs, axis=1)
    return ys


@pytest.mark.parametrize('module', [ScanModel, ScanInit])
def test_init_inside_traced_code(module):
  xs = jnp.ones((2, 4, 3))
  y, params = module.init(K0, xs)
  variants = {
      'jit_key_arg': jax.jit(lambda k: module.init(k, xs)[1])(K0),
      'jit_all_args': jax.jit(lambda k, x: module.init(k, x)[1])(K0, xs),
      'jit_key_inside': jax.jit(lambda: module.init(random.PRNGKey(0),
                                                    xs)[1])(),
      'by_shape': module.init_by_shape(K0, [xs.shape])[1],
      'by_shape_under_jit': jax.jit(
          lambda k: module.init_by_shape(k, [xs.shape])[1])(K0),
  }
  for p in variants.values():
    jax.tree_util.tree_map(_eq, params, p)
  _eq(jax.jit(nn.Model(module, params))(xs), y)


def test_make_rng_inside_jit_uses_context():

  def f(x):
    with nn.stochastic(K0):
      return nn.dropout(x, 0.5)

  _eq(jax.jit(f)(jnp.ones(8)), [0, 2, 0, 0, 0, 0, 0, 2])


def test_initializer_called_with_two_args_value_not_cast():
  calls = []

  def init16(*args):
    calls.append(len(args))
    return jnp.ones(args[1], jnp.float16)

  class M(nn.Module):

    def apply(self):
      return self.param('p', (2,), init16)

  y, params = M.init(K0)
  assert calls == [2] and y.dtype == jnp.float16
  assert M.call(params).dtype == jnp.float16


def test_param_shape_none_allows_any_pytree():

  class M(nn.Module):

    def apply(self):
      return self.param('wn', None, lambda k, s: {'a': jnp.ones(2), 's': s})

  y, params = M.init(K0)
  assert y['s'] is None and list(params['wn']) == ['a', 's']


# --- package surface ------------------------------------------------------------------


def test_package_surface():
  import flax.nn.stochastic  # pylint: disable=g-import-not-at-top,unused-import
  assert callable(nn.stochastic) and not isinstance(nn.stochastic,
                                                    type(sys))
  submodule = sys.modules['flaxlegacy.nn.stochastic']
  assert submodule.stochastic is nn.stochastic
  assert nn.make_rng is submodule.make_rng
  assert not hasattr(nn, 'jit')
  for name in ('_fold_in_str', '_ModuleFrame', '_module_stack',
               '_module_output_trackers', '_state_stack', '_top_frame',
               '_track_outputs', 'iterate_collection',
               'collection_from_iterable', 'ModuleState', 'TransparentModule',
               'TruncatedModule', 'is_stateful'):
    assert hasattr(base, name), name
  assert base.MODULE_CLASSMETHODS == ['create', 'create_by_shape', 'init',
                                      'init_by_shape', 'call', 'partial']
  for name in ('_mains', '_masters', '_trace_level', '_current_trace',
               '_level_of_value', 'CallStack', 'classproperty'):
    assert hasattr(utils, name), name
  top_level = (  # spec 1.2, v0.3.6
      'Module Model Collection capture_module_outputs module stateful'
      ' get_state module_method Dense DenseGeneral Conv ConvTranspose Embed'
      ' BatchNorm LayerNorm GroupNorm max_pool avg_pool LSTMCell GRUCell'
      ' ConvLSTM OptimizedLSTMCell dot_product_attention'
      ' MultiHeadDotProductAttention SelfAttention make_rng stochastic dropout'
      ' is_stochastic celu elu gelu glu leaky_relu log_sigmoid log_softmax'
      ' relu sigmoid soft_sign softmax softplus swish tanh silu').split()
  for name in top_level:
    assert hasattr(nn, name), name
  for name in ('activation', 'attention', 'base', 'initializers', 'linear',
               'normalization', 'pooling', 'recurrent', 'utils'):
    assert type(getattr(nn, name)) is type(sys), name
  assert nn.Module is base.Module and nn.Model is base.Model


def test_collection_lookup_with_hand_made_frames():
  root = base._ModuleFrame(None)  # pylint: disable=protected-access
  with base._module_stack.frame(root):  # pylint: disable=protected-access
    frame = base._ModuleFrame('dummy', parent=root)  # pylint: disable=protected-access
    with base._module_stack.frame(frame):  # pylint: disable=protected-access
      assert frame.path == '/dummy'
      coll = nn.Collection(state={'/dummy/sub': 1})
      assert coll['/dummy/sub'] == 1
      assert coll.retrieve() is None


def test_frame_paths():
  root = base._ModuleFrame(None)  # pylint: disable=protected-access
  named = base._ModuleFrame('n')  # pylint: disable=protected-access
  child = base._ModuleFrame('c', parent=named)  # pylint: disable=protected-access
  transparent = base._ModuleFrame('t', parent=root, transparent=True)  # pylint: disable=protected-access
  hidden = base._ModuleFrame('h', parent=transparent)  # pylint: disable=protected-access
  assert (root.path, named.path, child.path, transparent.path, hidden.path) == (
      '/', '/n', '/n/c', '/t', '/t')
  assert child.is_descendent_of(named) and child.is_descendent_of(None)
  assert not named.is_descendent_of(child)
  assert (root.create_name(), root.create_name()) == ('0', '1')


# --- the legacy error catalogue (spec 2.18): type and exact message -----------------


def _apply_with(body):
  """A module whose apply runs ``body(self)``."""
  return type('Body', (nn.Module,), {'apply': lambda self: body(self)})


def _twice(cls, **kw):
  def body(self):
    del self
    cls(**kw)
    cls(**kw)
  return body


def _shared_twice(self):
  del self
  KeyParam.shared(name='s')
  KeyParam.shared(name='s')


def _shared_then_unshared(self):
  del self
  KeyParam.shared(name='s')()
  KeyParam(name='s')


def _param_twice(self):
  self.param('p', (1,), _ones)
  self.param('p', (1,), _ones)


def _shape_mismatch():
  _, params = Dummy.init(K0, jnp.ones((3,)))
  Dummy.call(params, jnp.ones((4,)))


def _list_shape(self):
  self.param('p', [2, 3], _ones)


def _missing_child():
  class Parent(nn.Module):

    def apply(self, grow=False):
      if grow:
        KeyParam(name='late')
      return 0

  _, params = Parent.init(K0)
  Parent.call(params, grow=True)


def _missing_param():
  class M(nn.Module):

    def apply(self, name):
      return self.get_param(name)

  M.init(K0, 'nope')


def _missing_state_variable(self):
  self.state('v', collection=nn.Collection()).value  # pylint: disable=expression-not-assigned


def _store_from_anchor():
  class M(nn.Module):

    def apply(self):
      with nn.Collection().mutate() as coll:
        coll.store(1)

  M.init(K0)


def _store_out_of_scope():
  class Writer(nn.Module):

    def apply(self, coll):
      coll.store(1)

  class Inner(nn.Module):

    def apply(self, shared):
      with nn.Collection().mutate() as coll:
        shared(coll)

  class Outer(nn.Module):

    def apply(self):
      Inner(Writer.shared())

  Outer.init(K0)


def _retrieve_out_of_scope():
  class Inner(nn.Module):

    def apply(self, shared):
      with nn.Collection().mutate() as coll:
        shared(1., coll)

  class Outer(nn.Module):

    def apply(self):
      Inner(Store.shared())

  Outer.init(K0)


def _truncated_without_keywords():
  base.TruncatedModule.init(K0, 1.)


ERRORS = [
    ('module_outside_module', lambda: Dummy(jnp.ones(1)), ValueError,
     'A Module should only be instantiated directly inside another module.'),
    ('shared_outside_module', lambda: Dummy.shared(), ValueError,
     'The shared module should be used during Module application'),
    ('name_on_shared', lambda: _apply_with(
        lambda self: KeyParam.shared()(name='x')).init(K0), ValueError,
     'Cannot override the name of a shared module'),
    ('name_not_str', lambda: _apply_with(
        lambda self: KeyParam(name=3)).init(K0), ValueError,
     'Name must be a string.'),
    ('name_with_slash', lambda: _apply_with(
        lambda self: KeyParam(name='a/b')).init(K0), ValueError,
     'Name should not contain slashes or colons.'),
    ('name_with_colon', lambda: _apply_with(
        lambda self: KeyParam(name='a:b')).init(K0), ValueError,
     'Name should not contain slashes or colons.'),
    ('duplicate_name', lambda: _apply_with(
        _twice(KeyParam, name='dup')).init(K0), ValueError,
     'A module with named "dup" already exists.'),
    ('duplicate_partial_name', lambda: _apply_with(
        _twice(KeyParam.partial(name='dup'))).init(K0), ValueError,
     'A module with named "dup" already exists.'),
    ('shared_and_unshared', lambda: _apply_with(
        _shared_then_unshared).init(K0), ValueError,
     'The name "s" is used for both a shared and unshared module.'),
    ('shared_twice', lambda: _apply_with(_shared_twice).init(K0), ValueError,
     'Shared module named "s" already exists.'),
    ('missing_child', _missing_child, ValueError,
     'No module named late was created during initialization.'),
    ('param_twice', lambda: _apply_with(_param_twice).init(K0), ValueError,
     "Name 'p' was already used for another parameter."),
    ('missing_param', _missing_param, ValueError,
     "Parameter with name 'nope' does not exist."),
    ('shape_mismatch_on_apply', _shape_mismatch, ValueError,
     "Existing shape (3,) differs from requested shape (4,) (parameter "
     "'bias' in module /)"),
    ('list_shape', lambda: _apply_with(_list_shape).init(K0), ValueError,
     "Existing shape (2, 3) differs from requested shape [2, 3] (parameter "
     "'p' in module /)"),
    ('state_outside_module',
     lambda: nn.Module.state(None, 'x'), ValueError,
     "state should only be used inside a module's apply function."),
    ('is_initializing_outside_module',
     lambda: nn.Module.is_initializing(None), ValueError,
     "is_initializing should only be used inside a module's apply function."),
    ('retrieve_outside_module', lambda: nn.Collection().retrieve(),
     ValueError,
     "retrieve should only be used inside a module's apply function."),
    ('store_outside_module', lambda: nn.Collection().store(1), ValueError,
     "store should only be used inside a module's apply function."),
    ('state_without_stateful', lambda: _apply_with(
        lambda self: self.state('v')).init(K0), ValueError,
     'Use the flax.nn.stateful context manager to enable stateful'
     ' computations.'),
    ('get_state_without_stateful', nn.get_state, ValueError,
     'Use the flax.nn.stateful context manager to enable stateful'
     ' computations.'),
    ('missing_state_variable', lambda: _apply_with(
        _missing_state_variable).init(K0), ValueError,
     'No state variable named `v` exists.'),
    ('store_from_anchor', _store_from_anchor, ValueError,
     'State should be stored from within a module. Consider using the value'
     ' directly instead of storing it in a Collection.'),
    ('store_out_of_scope', _store_out_of_scope, ValueError,
     'Trying to capture state outside the scope of this Collection. Most'
     ' likely due to passing around a shared Module.'),
    ('retrieve_out_of_scope', _retrieve_out_of_scope, ValueError,
     'Trying to capture state outside the scope of this Collection. Most'
     ' likely due to passing around a shared Module.'),
    ('make_rng_without_stochastic', nn.make_rng, ValueError,
     'Use the `nn.stochastic()` context manager to enable stochastic'
     ' computations.'),
    ('dropout_without_stochastic', lambda: nn.dropout(jnp.ones(2), 0.5),
     ValueError,
     'Use the `nn.stochastic()` context manager to enable stochastic'
     ' computations.'),
    ('truncated_without_keywords', _truncated_without_keywords, ValueError,
     '`wrapped_module` and `truncate_path` are required keyword arguments'),
    ('input_specs_not_iterable', lambda: Dummy.init_by_shape(K0, None),
     TypeError,
     'input_specs must be an iterable of shapes or (shape, dtype) pairs, got'
     ' None.'),
    ('input_spec_bare_int', lambda: Dummy.init_by_shape(K0, (1, 3)),
     TypeError,
     'input_specs must be an iterable of shapes or (shape, dtype) pairs;'
     " invalid element 1: 'int' object is not iterable"),
    ('abstract_module', lambda: nn.Module.init(K0), TypeError,
     "Can't instantiate abstract class Module"),
]


@pytest.mark.parametrize('fn,exc,message', [e[1:] for e in ERRORS],
                         ids=[e[0] for e in ERRORS])
def test_error_catalogue(fn, exc, message):
  with pytest.raises(exc) as info:
    fn()
  assert str(info.value).startswith(message), str(info.value)
  if exc is ValueError:
    assert str(info.value) == message
