"""The way out: Optimizer -> TrainState, adapters both ways, names, convert."""

import os
import warnings

import flax
from flax import linen
from flax import serialization
from flax import traverse_util
from flax.training import checkpoints as flax_checkpoints
from flax.training import train_state as flax_train_state
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import flaxlegacy

flaxlegacy.activate()

from flaxlegacy import cli  # noqa: E402
from flaxlegacy import migrate  # noqa: E402
from flaxlegacy import nn  # noqa: E402
from flaxlegacy import optim  # noqa: E402
from flaxlegacy.migrate import convert  # noqa: E402
from flaxlegacy.training import checkpoints as legacy_checkpoints  # noqa: E402
from tests import test_checkpoints as tc  # noqa: E402


def leaves_equal(a, b, rtol=0.0):
  la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
  assert len(la) == len(lb)
  for x, y in zip(la, lb):
    if rtol:
      np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol,
                                 atol=1e-7)
    else:
      np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


class MLP(nn.Module):

  def apply(self, x):
    x = nn.Dense(x, features=5)
    x = nn.relu(x)
    x = nn.Dense(x, features=2)
    return x


def mlp_model():
  _, params = MLP.init_by_shape(jax.random.PRNGKey(0), [((4, 3), jnp.float32)])
  return nn.Model(MLP, params)


def mlp_batch(i):
  r = np.random.RandomState(i)
  return r.normal(size=(4, 3)).astype(np.float32), r.normal(
      size=(4, 2)).astype(np.float32)


def mlp_grad(model, i):
  x, y = mlp_batch(i)
  return jax.grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)


# --- to_train_state ----------------------------------------------------------------

OPTIMIZERS = [
    ('sgd', lambda: optim.GradientDescent(0.1), 0.0),
    ('momentum', lambda: optim.Momentum(0.1, beta=0.9), 0.0),
    ('nesterov_wd', lambda: optim.Momentum(0.1, 0.9, weight_decay=1e-2,
                                           nesterov=True), 0.0),
    ('adam', lambda: optim.Adam(0.01), 0.0),
    ('adam_wd', lambda: optim.Adam(0.01, weight_decay=1e-2), 0.0),
    ('adagrad', lambda: optim.Adagrad(0.1), 0.0),
    ('rmsprop_centered', lambda: optim.RMSProp(0.01, centered=True), 0.0),
    ('lamb', lambda: optim.LAMB(0.01, weight_decay=1e-2), 0.0),
    ('lars', lambda: optim.LARS(0.1, weight_decay=1e-3), 0.0),
    ('adafactor', lambda: optim.Adafactor(0.01), 0.0),
    ('adadelta', lambda: optim.Adadelta(1.0), 0.0),
    ('adabelief', lambda: optim.AdaBelief(0.01), 0.0),
    # Not optax-backed: as_optax() returns new - old params (one rounding).
    ('weight_norm', lambda: optim.WeightNorm(optim.Momentum(0.1, 0.9)), 1e-6),
]


@pytest.mark.parametrize('name,make,rtol', OPTIMIZERS,
                         ids=[o[0] for o in OPTIMIZERS])
def test_one_step_of_each_gives_the_same_params(name, make, rtol):
  del name
  optimizer = make().create(mlp_model())
  state = migrate.to_train_state(optimizer)
  assert isinstance(state, flax_train_state.TrainState)
  assert state.apply_fn == optimizer.target.module.call
  leaves_equal(state.params, optimizer.target.params)
  for i in range(3):
    grad = mlp_grad(optimizer.target, i)
    optimizer = optimizer.apply_gradient(grad)
    state = state.apply_gradients(grads=grad.params)
    leaves_equal(state.params, optimizer.target.params, rtol)
  assert int(state.step) == int(optimizer.state.step) == 3
  # ... and back: the same legacy Optimizer.
  back = migrate.from_train_state(state, optimizer.optimizer_def, MLP)
  assert isinstance(back.target, nn.Model)
  leaves_equal(back.state, optimizer.state, rtol)
  leaves_equal(back.target, optimizer.target, rtol)
  # The legacy apply function still runs the legacy module.
  x, _ = mlp_batch(0)
  np.testing.assert_allclose(state.apply_fn(state.params, x),
                             optimizer.target(x), rtol=max(rtol, 1e-6))


def test_to_train_state_under_jit_and_overrides():
  optimizer = optim.Momentum(beta=0.9).create(mlp_model())  # lr per call
  state = migrate.to_train_state(optimizer, learning_rate=0.05)

  @jax.jit
  def step(optimizer, state, grad):
    return (optimizer.apply_gradient(grad, learning_rate=0.05),
            state.apply_gradients(grads=grad.params))

  grad = mlp_grad(optimizer.target, 0)
  optimizer, state = step(optimizer, state, grad)
  leaves_equal(state.params, optimizer.target.params)


def test_to_train_state_needs_a_learning_rate():
  optimizer = optim.Momentum(beta=0.9).create(mlp_model())
  with pytest.raises(AssertionError, match='no learning rate provided'):
    migrate.to_train_state(optimizer)


def test_to_train_state_refuses_replicated_optimizer():
  optimizer = optim.Momentum(0.1).create(mlp_model()).replicate(
      devices=jax.local_devices()[:1])
  with pytest.raises(ValueError, match=r'call optimizer.unreplicate\(\) '
                     'first'):
    migrate.to_train_state(optimizer)


def test_to_train_state_linen_names():
  optimizer = optim.Momentum(0.1, 0.9).create(tc.mnist_template().target)
  state = migrate.to_train_state(optimizer, linen_names=True)
  assert sorted(state.params) == ['Conv_0', 'Conv_1', 'Dense_0', 'Dense_1']
  assert state.apply_fn is None
  leaves_equal(state.params['Dense_1'],
               optimizer.target.params['Dense_3'])
  assert sorted(state.opt_state[0].trace) == sorted(state.params)


def test_reference_checkpoint_continues_as_train_state(reference):
  """Legacy checkpoint -> TrainState; 3 more steps match the reference run."""
  arrays = tc.npz(reference, 'mnist_cnn.npz')
  optimizer = legacy_checkpoints.restore_checkpoint(
      os.path.join(reference, 'checkpoints', 'mnist_cnn'), tc.mnist_template())
  state = migrate.to_train_state(optimizer)

  @jax.jit
  def train_step(state, x, y):
    def loss_fn(params):
      logits = state.apply_fn(params, x)
      return -jnp.mean(jnp.sum(jax.nn.one_hot(y, 10) * logits, axis=-1))
    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss

  names = [str(n).split('/', 1)[1] for n in arrays['model_leaf_names']]
  for k in range(3):
    state, loss = train_step(state, arrays['data/images'][20 + k],
                             arrays['data/labels'][20 + k])
    np.testing.assert_allclose(loss, arrays['pmap/loss'][k], rtol=1e-5)
    flat = traverse_util.flatten_dict(state.params, sep='/')
    l2 = [np.linalg.norm(np.asarray(flat[n], np.float64)) for n in names]
    np.testing.assert_allclose(l2, arrays[f'pmap/step_{k:02d}/params/l2'],
                               rtol=1e-5)
  assert int(state.step) == int(arrays['pmap/final_step'])


@pytest.fixture(scope='module')
def reference(shared):
  del shared
  return tc.conformance.reference_dir()


def test_batch_stats_train_state(reference):
  restored = legacy_checkpoints.restore_checkpoint(
      os.path.join(reference, 'checkpoints', 'resnet_stateful'),
      tc.resnet_template())
  state = migrate.to_train_state(restored.optimizer,
                                 batch_stats=restored.model_state)
  assert isinstance(state, migrate.TrainState)
  arrays = tc.npz(reference, 'resnet_stateful.npz')
  np.testing.assert_array_equal(
      state.batch_stats['block1']['proj_bn']['var'],
      arrays['checkpoint/state_dict/model_state//block1/proj_bn/var'])


# --- names --------------------------------------------------------------------------


def test_linen_params_legacy_case():
  # The case of legacy v0.3.6 checkpoints_test.test_convert_pre_linen.
  params = migrate.linen_params({
      'mod_0': {'submod1_0': {}, 'submod2_1': {}, 'submod1_2': {}},
      'mod2_2': {'submod2_2_0': {}},
      'mod2_11': {'submod2_11_0': {}},
      'mod2_1': {'submod2_1_0': {}},
  })
  assert params == {
      'mod_0': {'submod1_0': {}, 'submod1_1': {}, 'submod2_0': {}},
      'mod2_0': {'submod2_1_0': {}},
      'mod2_1': {'submod2_2_0': {}},
      'mod2_2': {'submod2_11_0': {}},
  }


def test_batch_stats_round_trip():
  a, b, c = (np.full((2,), v, np.float32) for v in (1, 2, 3))
  collection = nn.Collection({'/': {'count': c},
                              '/block0/bn1': {'mean': a, 'var': b},
                              '/BatchNorm_2': {'mean': b, 'var': a}})
  tree = migrate.batch_stats_from_collection(collection)
  assert tree == {'count': c, 'block0': {'bn1': {'mean': a, 'var': b}},
                  'BatchNorm_2': {'mean': b, 'var': a}}
  renamed = migrate.batch_stats_from_collection(collection, linen_names=True)
  assert sorted(renamed) == ['BatchNorm_0', 'block0', 'count']
  back = migrate.collection_from_batch_stats(tree)
  assert isinstance(back, nn.Collection)
  assert back.as_dict() == collection.as_dict()


def test_batch_stats_refuses_non_dict_state():
  with pytest.raises(ValueError, match="module path '/a' is a int"):
    migrate.batch_stats_from_collection({'/a': 3})


# --- adapters -----------------------------------------------------------------------


def resnet_legacy():
  x = np.random.RandomState(0).normal(size=(8, 16, 16, 3)).astype(np.float32)
  with nn.stateful() as state:
    with nn.stochastic(jax.random.PRNGKey(3)):
      _, params = tc.SmallResNet.init(jax.random.PRNGKey(4), x)
  return x, params, state


class Outer(linen.Module):
  """A linen model holding a legacy ResNet as a submodule."""

  legacy: object

  @linen.compact
  def __call__(self, x):
    return migrate.LegacyModule(self.legacy, name='resnet')(x)


class KeyProbe(linen.Module):
  """Returns the key a submodule named 'resnet' draws from 'dropout'."""

  @linen.compact
  def __call__(self):
    return _Draw(name='resnet')()


class _Draw(linen.Module):

  def __call__(self):
    return self.make_rng('dropout')


def test_legacy_module_in_linen_train_and_eval():
  x, params, state = resnet_legacy()
  variables = {k: {'resnet': v}
               for k, v in migrate.legacy_variables(params, state).items()}
  assert sorted(variables) == ['batch_stats', 'params']
  rngs = {'dropout': jax.random.PRNGKey(9)}
  # Training: batch statistics updated, dropout from the linen stream.
  y, updates = Outer(tc.SmallResNet).apply(variables, x, rngs=rngs,
                                           mutable=['batch_stats'])
  key = KeyProbe().apply({}, rngs=rngs)
  with nn.stateful(state) as new_state:
    with nn.stochastic(key):
      y_legacy = nn.Model(tc.SmallResNet, params)(x)
  np.testing.assert_array_equal(y, y_legacy)
  leaves_equal(updates['batch_stats']['resnet'],
               migrate.batch_stats_from_collection(new_state))
  # Evaluation: frozen statistics, no dropout.
  eval_module = tc.SmallResNet.partial(train=False)
  y = Outer(eval_module).apply(variables, x)
  with nn.stateful(state, mutable=False):
    y_legacy = nn.Model(eval_module, params)(x)
  np.testing.assert_array_equal(y, y_legacy)


def test_legacy_module_init_keeps_legacy_layout():
  x, params, state = resnet_legacy()
  # (a legacy process: linen returns FrozenDicts, as flax 0.3 did)
  variables = flax.core.unfreeze(Outer(tc.SmallResNet).init(
      {'params': jax.random.PRNGKey(0), 'dropout': jax.random.PRNGKey(1)}, x))
  assert (jax.tree_util.tree_structure(variables['params']['resnet']) ==
          jax.tree_util.tree_structure(params))
  assert (jax.tree_util.tree_structure(variables['batch_stats']['resnet']) ==
          jax.tree_util.tree_structure(
              migrate.batch_stats_from_collection(state)))


def test_legacy_module_gradients():
  x, params, state = resnet_legacy()
  eval_module = tc.SmallResNet.partial(train=False)
  variables = migrate.legacy_variables(params, state)

  def linen_loss(p):
    return jnp.sum(migrate.LegacyModule(eval_module).apply(
        {'params': p, 'batch_stats': variables['batch_stats']}, x))

  def legacy_loss(model):
    with nn.stateful(state, mutable=False):
      return jnp.sum(model(x))

  g_linen = jax.grad(linen_loss)(variables['params'])
  g_legacy = jax.grad(legacy_loss)(nn.Model(eval_module, params))
  leaves_equal(g_linen, g_legacy.params)


class Mixed(nn.Module):
  """A legacy model with linen layers inside."""

  def apply(self, x, train=True):
    x = nn.Dense(x, 5)
    x = migrate.LinenModule(
        x, module=linen.BatchNorm(use_running_average=not train), name='bn')
    x = migrate.LinenModule(
        x, module=linen.Dropout(0.5, deterministic=not train), name='drop')
    return migrate.LinenModule(x, module=linen.Dense(3), name='head')


def test_linen_module_in_legacy():
  x = np.random.RandomState(1).normal(size=(4, 7)).astype(np.float32)
  with nn.stateful() as state:
    with nn.stochastic(jax.random.PRNGKey(1)):
      _, params = Mixed.init(jax.random.PRNGKey(0), x)
  assert sorted(params) == ['Dense_0', 'bn', 'drop', 'head']
  assert sorted(params['head']['params']) == ['bias', 'kernel']
  assert list(state.as_dict()) == ['/bn']
  assert sorted(state.as_dict()['/bn']['batch_stats']) == ['mean', 'var']

  # Training: equals the same linen layers applied by hand.
  with nn.stateful(state) as new_state:
    with nn.stochastic(jax.random.PRNGKey(2)):
      y = Mixed.call(params, x)
  h = nn.Dense.call(params['Dense_0'], x, 5)
  h, bn_updates = linen.BatchNorm(use_running_average=False).apply(
      {'params': params['bn']['params'],
       'batch_stats': state.as_dict()['/bn']['batch_stats']}, h,
      mutable=['batch_stats'])
  # Under nn.stochastic every LinenModule call draws one key per RNG stream,
  # in call order: 'bn' got fold_in(key, 1), 'drop' fold_in(key, 2).
  h = linen.Dropout(0.5, deterministic=False).apply(
      {}, h, rngs={'dropout': jax.random.fold_in(jax.random.PRNGKey(2), 2)})
  expected = linen.Dense(3).apply({'params': params['head']['params']}, h)
  np.testing.assert_allclose(y, expected, rtol=1e-6)
  leaves_equal(new_state.as_dict()['/bn']['batch_stats'],
               bn_updates['batch_stats'])

  # Evaluation with frozen state.
  with nn.stateful(new_state, mutable=False):
    y_eval = Mixed.call(params, x, train=False)
  assert y_eval.shape == (4, 3)


def test_linen_module_trains_in_legacy_optimizer():
  x = np.ones((4, 7), np.float32)
  with nn.stateful() as state:
    _, params = Mixed.partial(train=False).init(jax.random.PRNGKey(0), x)
  optimizer = optim.Adam(0.01).create(nn.Model(Mixed.partial(train=False),
                                               params))

  def loss_fn(model):
    with nn.stateful(state, mutable=False):
      return jnp.mean(model(x) ** 2)

  before = loss_fn(optimizer.target)
  for _ in range(3):
    optimizer = optimizer.apply_gradient(jax.grad(loss_fn)(optimizer.target))
  assert loss_fn(optimizer.target) < before


# --- convert --------------------------------------------------------------------------


class LinenCNN(linen.Module):
  """The linen port of the reference MNIST CNN."""

  @linen.compact
  def __call__(self, x):
    x = linen.relu(linen.Conv(32, (3, 3))(x))
    x = linen.avg_pool(x, (2, 2), (2, 2))
    x = linen.relu(linen.Conv(64, (3, 3))(x))
    x = linen.avg_pool(x, (2, 2), (2, 2))
    x = x.reshape((x.shape[0], -1))
    x = linen.relu(linen.Dense(256)(x))
    return linen.log_softmax(linen.Dense(10)(x))


def linen_target(tx=None):
  model = LinenCNN()
  params = model.init(jax.random.PRNGKey(0), jnp.ones((1, 28, 28, 1)))
  return flax_train_state.TrainState.create(
      apply_fn=model.apply, params=params['params'],
      tx=tx or optax.sgd(0.1, momentum=0.9))


def run_cli(*argv):
  return cli.main(['convert', *map(str, argv)])


@pytest.mark.parametrize('fmt', ['orbax', 'msgpack'])
def test_convert_mnist_restores_in_linen_optax(reference, tmp_path, fmt,
                                               capsys):
  out = tmp_path / 'out'
  rc = run_cli(os.path.join(reference, 'checkpoints', 'mnist_cnn'), out,
               '--optimizer', 'Momentum', '--hparam', 'beta=0.9',
               '--format', fmt)
  printed = capsys.readouterr().out
  assert rc == 0, printed
  assert 'module names: legacy auto-naming -> linen numbering' in printed
  assert os.listdir(out) == ['checkpoint_20']
  assert os.path.isdir(out / 'checkpoint_20') == (fmt == 'orbax')
  # Pure linen + optax code restores it.
  state = flax_checkpoints.restore_checkpoint(str(out), linen_target())
  assert isinstance(state, flax_train_state.TrainState)
  assert state.step == 20
  arrays = tc.npz(reference, 'mnist_cnn.npz')
  mapping = {'Conv_0': 'Conv_0', 'Conv_1': 'Conv_1', 'Dense_0': 'Dense_2',
             'Dense_1': 'Dense_3'}
  for linen_name, legacy_name in mapping.items():
    for leaf in ('kernel', 'bias'):
      np.testing.assert_array_equal(
          state.params[linen_name][leaf],
          arrays[f'final/optimizer/target/params/{legacy_name}/{leaf}'])
      np.testing.assert_array_equal(
          state.opt_state[0].trace[linen_name][leaf],
          arrays['final/optimizer/state/param_states/params/'
                 f'{legacy_name}/{leaf}/momentum'])
  np.testing.assert_allclose(
      state.apply_fn({'params': state.params}, arrays['data/images'][0]),
      arrays['final/logits_batch0'], rtol=1e-4, atol=1e-5)

  # Training continues in optax and matches the legacy continuation.
  @jax.jit
  def train_step(state, x, y):
    def loss_fn(params):
      logits = state.apply_fn({'params': params}, x)
      return -jnp.mean(jnp.sum(jax.nn.one_hot(y, 10) * logits, axis=-1))
    return state.apply_gradients(grads=jax.grad(loss_fn)(state.params))

  for k in range(3):
    state = train_step(state, arrays['data/images'][20 + k],
                       arrays['data/labels'][20 + k])
  l2 = np.linalg.norm(np.asarray(state.params['Dense_0']['kernel'],
                                 np.float64))
  names = [str(n) for n in arrays['model_leaf_names']]
  np.testing.assert_allclose(
      l2, arrays['pmap/step_02/params/l2'][names.index(
          'params/Dense_2/kernel')], rtol=1e-5)


def test_convert_resnet_train_state(reference, tmp_path, capsys):
  out = tmp_path / 'out'
  rc = run_cli(os.path.join(reference, 'checkpoints', 'resnet_stateful',
                            'checkpoint_5'), out, '--optimizer', 'Momentum',
               '--format', 'msgpack', '--names', 'legacy')
  printed = capsys.readouterr().out
  assert rc == 0, printed
  assert 'model_state: nn.Collection -> batch_stats' in printed
  raw = flax_checkpoints.restore_checkpoint(str(out), None)
  assert sorted(raw) == ['batch_stats', 'opt_state', 'params', 'step']
  arrays = tc.npz(reference, 'resnet_stateful.npz')
  np.testing.assert_array_equal(
      raw['batch_stats']['block0']['bn2']['mean'],
      arrays['checkpoint/state_dict/model_state//block0/bn2/mean'])
  np.testing.assert_array_equal(
      raw['params']['head']['kernel'],
      arrays['checkpoint/state_dict/optimizer/target/params/head/kernel'])
  assert raw['step'] == 5


@pytest.mark.parametrize('argv,message', [
    ([], 'cannot tell which legacy optimizer wrote this checkpoint: its '
     "per-parameter states have fields [('momentum',)] (candidates: LARS, "
     'Momentum); pass --optimizer NAME'),
    (['--optimizer', 'Adam'], 'the optimizer state does not fit Adam'),
    (['--optimizer', 'Nadam'], '--optimizer Nadam: flax.optim has no '
     'optimizer of that name'),
    (['--optimizer', 'Momentum', '--hparam', 'bogus=1'],
     "unexpected keyword argument 'bogus'"),
    (['--optimizer', 'Momentum', '--hparam', 'beta'],
     "--hparam 'beta': expected NAME=VALUE"),
])
def test_convert_errors(reference, tmp_path, capsys, argv, message):
  rc = run_cli(os.path.join(reference, 'checkpoints', 'mnist_cnn'),
               tmp_path / 'out', *argv)
  err = capsys.readouterr().err
  assert rc == 1
  assert err.startswith('flaxlegacy convert: error: ')
  assert message in err, err
  assert not os.path.exists(tmp_path / 'out' / 'checkpoint_20')


def test_convert_bad_file_names_it(tmp_path, capsys):
  bad = tmp_path / 'checkpoint_3'
  bad.write_bytes(b'\x83\x01')
  assert run_cli(bad, tmp_path / 'out') == 1
  assert (f'Cannot restore checkpoint {bad}: the file is truncated'
          in capsys.readouterr().err)


def test_convert_refuses_to_overwrite(reference, tmp_path, capsys):
  args = (os.path.join(reference, 'checkpoints', 'mnist_cnn'),
          tmp_path / 'out', '--optimizer', 'Momentum', '--format', 'msgpack')
  assert run_cli(*args) == 0
  assert run_cli(*args) == 1
  assert 'exists; pass --overwrite' in capsys.readouterr().err
  assert run_cli(*args, '--overwrite') == 0


@pytest.mark.parametrize('name,make,rtol', OPTIMIZERS[:-1],
                         ids=[o[0] for o in OPTIMIZERS[:-1]])
def test_modern_optax_state_transplant(name, make, rtol):
  """Every optax-backed optimizer's state maps onto its modern equivalent."""
  del name, rtol
  optimizer = make().create(mlp_model())
  optimizer = optimizer.apply_gradient(mlp_grad(optimizer.target, 0))
  state = migrate.to_train_state(optimizer)
  tx = migrate.modern_optax(optimizer.optimizer_def)
  template = tx.init(state.params)
  moved = migrate.transplant_state(state.opt_state, template)
  assert (jax.tree_util.tree_structure(moved) ==
          jax.tree_util.tree_structure(template))
  leaves_equal(convert._records(moved), convert._records(state.opt_state))
  # The modern transformation runs from it.
  updates, _ = tx.update(mlp_grad(optimizer.target, 1).params, moved,
                         state.params)
  assert all(np.all(np.isfinite(u)) for u in jax.tree_util.tree_leaves(
      updates))


def test_convert_legacy_numerics(reference, tmp_path):
  path, state, notes = migrate.convert_checkpoint(
      os.path.join(reference, 'checkpoints', 'mnist_cnn'), str(tmp_path),
      optimizer='Momentum', hparams={'learning_rate': 0.1, 'beta': 0.9},
      legacy_numerics=True, fmt='msgpack')
  assert any('legacy numerics' in n for n in notes)
  tx = optim.Momentum(0.1, 0.9).as_optax()
  restored = flax_checkpoints.restore_checkpoint(path, linen_target(tx))
  leaves_equal(restored.opt_state, state.opt_state)


def test_weight_norm_has_no_modern_equivalent():
  with pytest.raises(convert.ConversionError, match='WeightNorm has no '
                     'modern optax equivalent'):
    migrate.modern_optax(optim.WeightNorm(optim.Momentum(0.1)))


def test_serialization_of_converted_state_is_plain(reference, tmp_path):
  _, state, _ = migrate.convert_checkpoint(
      os.path.join(reference, 'checkpoints', 'mnist_cnn'), str(tmp_path),
      optimizer='Momentum', fmt='msgpack')
  sd = serialization.to_state_dict(state)
  assert sorted(sd) == ['opt_state', 'params', 'step']
  with warnings.catch_warnings():
    warnings.simplefilter('error')
    assert isinstance(state.step, int)
