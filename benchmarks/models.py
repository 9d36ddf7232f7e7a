"""The benchmarked models, each written twice: legacy flax.nn and linen.

The two versions of a model compute the same function with the same
parameter shapes, so a legacy program under flaxlegacy and its linen + optax
port do the same arithmetic; any difference in speed is the shim's cost.
The legacy halves are written as 2020 code was (``from flax import nn``).
"""

import functools

import flax.linen as linen
from flax.training import train_state
import jax
import jax.numpy as jnp
import optax

from flax import nn  # legacy API, served by flaxlegacy
from flax import optim  # legacy API, served by flaxlegacy


# --- MNIST CNN (the legacy example's model) ---------------------------------


class LegacyCNN(nn.Module):

  def apply(self, x):
    x = nn.Conv(x, features=32, kernel_size=(3, 3))
    x = nn.relu(x)
    x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
    x = nn.Conv(x, features=64, kernel_size=(3, 3))
    x = nn.relu(x)
    x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
    x = x.reshape((x.shape[0], -1))
    x = nn.Dense(x, features=256)
    x = nn.relu(x)
    x = nn.Dense(x, features=10)
    return nn.log_softmax(x)


class LinenCNN(linen.Module):

  @linen.compact
  def __call__(self, x):
    x = linen.Conv(features=32, kernel_size=(3, 3))(x)
    x = linen.relu(x)
    x = linen.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
    x = linen.Conv(features=64, kernel_size=(3, 3))(x)
    x = linen.relu(x)
    x = linen.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
    x = x.reshape((x.shape[0], -1))
    x = linen.Dense(features=256)(x)
    x = linen.relu(x)
    x = linen.Dense(features=10)(x)
    return linen.log_softmax(x)


# --- ResNet with BatchNorm (the ImageNet example's family) ------------------


class LegacyResidualBlock(nn.Module):
  """ResNet v1 basic (18/34) or bottleneck (50+) block, legacy style."""

  def apply(self, x, filters, strides=(1, 1), bottleneck=False, train=True,
            dtype=jnp.float32):
    batch_norm = nn.BatchNorm.partial(use_running_average=not train,
                                      momentum=0.9, epsilon=1e-5, dtype=dtype)
    conv = nn.Conv.partial(bias=False, dtype=dtype)
    residual = x
    if bottleneck:
      y = conv(x, filters, (1, 1), name='conv1')
      y = nn.relu(batch_norm(y, name='bn1'))
      y = conv(y, filters, (3, 3), strides, name='conv2')
      y = nn.relu(batch_norm(y, name='bn2'))
      y = conv(y, filters * 4, (1, 1), name='conv3')
      y = batch_norm(y, name='bn3', scale_init=nn.initializers.zeros)
      out_filters = filters * 4
    else:
      y = conv(x, filters, (3, 3), strides, name='conv1')
      y = nn.relu(batch_norm(y, name='bn1'))
      y = conv(y, filters, (3, 3), name='conv2')
      y = batch_norm(y, name='bn2', scale_init=nn.initializers.zeros)
      out_filters = filters
    if residual.shape != y.shape:
      residual = conv(residual, out_filters, (1, 1), strides,
                      name='proj_conv')
      residual = batch_norm(residual, name='proj_bn')
    return nn.relu(residual + y)


class LegacyResNet(nn.Module):

  def apply(self, x, num_classes, stage_sizes, num_filters=64,
            bottleneck=False, small_inputs=False, train=True,
            dtype=jnp.float32):
    if small_inputs:
      x = nn.Conv(x, num_filters, (3, 3), bias=False, dtype=dtype,
                  name='init_conv')
    else:
      x = nn.Conv(x, num_filters, (7, 7), (2, 2), padding=[(3, 3), (3, 3)],
                  bias=False, dtype=dtype, name='init_conv')
    x = nn.BatchNorm(x, use_running_average=not train, momentum=0.9,
                     epsilon=1e-5, dtype=dtype, name='init_bn')
    x = nn.relu(x)
    if not small_inputs:
      x = nn.max_pool(x, (3, 3), strides=(2, 2), padding='SAME')
    for i, block_size in enumerate(stage_sizes):
      for j in range(block_size):
        strides = (2, 2) if i > 0 and j == 0 else (1, 1)
        x = LegacyResidualBlock(x, num_filters * 2 ** i, strides=strides,
                                bottleneck=bottleneck, train=train,
                                dtype=dtype)
    x = jnp.mean(x, axis=(1, 2))
    x = nn.Dense(x, num_classes, dtype=dtype)
    return nn.log_softmax(x)


class LinenResidualBlock(linen.Module):
  filters: int
  strides: tuple = (1, 1)
  bottleneck: bool = False
  train: bool = True
  dtype: object = jnp.float32

  @linen.compact
  def __call__(self, x):
    batch_norm = functools.partial(linen.BatchNorm,
                                   use_running_average=not self.train,
                                   momentum=0.9, epsilon=1e-5,
                                   dtype=self.dtype)
    conv = functools.partial(linen.Conv, use_bias=False, dtype=self.dtype)
    residual = x
    if self.bottleneck:
      y = conv(self.filters, (1, 1), name='conv1')(x)
      y = linen.relu(batch_norm(name='bn1')(y))
      y = conv(self.filters, (3, 3), self.strides, name='conv2')(y)
      y = linen.relu(batch_norm(name='bn2')(y))
      y = conv(self.filters * 4, (1, 1), name='conv3')(y)
      y = batch_norm(name='bn3', scale_init=linen.initializers.zeros)(y)
      out_filters = self.filters * 4
    else:
      y = conv(self.filters, (3, 3), self.strides, name='conv1')(x)
      y = linen.relu(batch_norm(name='bn1')(y))
      y = conv(self.filters, (3, 3), name='conv2')(y)
      y = batch_norm(name='bn2', scale_init=linen.initializers.zeros)(y)
      out_filters = self.filters
    if residual.shape != y.shape:
      residual = conv(out_filters, (1, 1), self.strides,
                      name='proj_conv')(residual)
      residual = batch_norm(name='proj_bn')(residual)
    return linen.relu(residual + y)


class LinenResNet(linen.Module):
  num_classes: int
  stage_sizes: tuple
  num_filters: int = 64
  bottleneck: bool = False
  small_inputs: bool = False
  train: bool = True
  dtype: object = jnp.float32

  @linen.compact
  def __call__(self, x):
    if self.small_inputs:
      x = linen.Conv(self.num_filters, (3, 3), use_bias=False,
                     dtype=self.dtype, name='init_conv')(x)
    else:
      x = linen.Conv(self.num_filters, (7, 7), (2, 2),
                     padding=[(3, 3), (3, 3)], use_bias=False,
                     dtype=self.dtype, name='init_conv')(x)
    x = linen.BatchNorm(use_running_average=not self.train, momentum=0.9,
                        epsilon=1e-5, dtype=self.dtype, name='init_bn')(x)
    x = linen.relu(x)
    if not self.small_inputs:
      x = linen.max_pool(x, (3, 3), strides=(2, 2), padding='SAME')
    for i, block_size in enumerate(self.stage_sizes):
      for j in range(block_size):
        strides = (2, 2) if i > 0 and j == 0 else (1, 1)
        x = LinenResidualBlock(self.num_filters * 2 ** i, strides=strides,
                               bottleneck=self.bottleneck, train=self.train,
                               dtype=self.dtype)(x)
    x = jnp.mean(x, axis=(1, 2))
    x = linen.Dense(self.num_classes, dtype=self.dtype)(x)
    return linen.log_softmax(x)


RESNETS = {
    # name: (stage_sizes, bottleneck)
    'resnet_tiny': ((1, 1), False),  # the smoke test's: cheap to compile
    'resnet18': ((2, 2, 2, 2), False),
    'resnet50': ((3, 4, 6, 3), True),
}


def resnet_kwargs(name, small_inputs, num_filters=64, num_classes=10):
  stage_sizes, bottleneck = RESNETS[name]
  return dict(num_classes=num_classes, stage_sizes=stage_sizes,
              num_filters=num_filters, bottleneck=bottleneck,
              small_inputs=small_inputs)


# --- losses and train steps --------------------------------------------------


def cross_entropy(log_probs, labels):
  one_hot = jax.nn.one_hot(labels, log_probs.shape[-1])
  return -jnp.mean(jnp.sum(one_hot * log_probs, axis=-1))


def legacy_train_step(optimizer, batch):
  """The legacy MNIST example's step: value_and_grad on the Model."""
  def loss_fn(model):
    return cross_entropy(model(batch['image']), batch['label'])
  loss, grad = jax.value_and_grad(loss_fn)(optimizer.target)
  return optimizer.apply_gradient(grad), loss


def linen_train_step(state, batch):
  def loss_fn(params):
    return cross_entropy(state.apply_fn({'params': params}, batch['image']),
                         batch['label'])
  loss, grads = jax.value_and_grad(loss_fn)(state.params)
  return state.apply_gradients(grads=grads), loss


def legacy_stateful_train_step(optimizer, model_state, batch):
  """The legacy ImageNet example's step: BatchNorm state via nn.stateful."""
  def loss_fn(model):
    with nn.stateful(model_state) as new_state:
      log_probs = model(batch['image'])
    return cross_entropy(log_probs, batch['label']), new_state
  (loss, new_state), grad = jax.value_and_grad(loss_fn, has_aux=True)(
      optimizer.target)
  return optimizer.apply_gradient(grad), new_state, loss


class BNTrainState(train_state.TrainState):
  batch_stats: dict = None


def legacy_pmap_train_step(optimizer, batch):
  """The legacy ImageNet example's data-parallel step: optimizer replicated
  with ``jax_utils.replicate``, gradients averaged with ``lax.pmean``."""
  def loss_fn(model):
    return cross_entropy(model(batch['image']), batch['label'])
  loss, grad = jax.value_and_grad(loss_fn)(optimizer.target)
  grad = jax.lax.pmean(grad, 'batch')
  return optimizer.apply_gradient(grad), loss


def legacy_replicated_train_step(optimizer, batch):
  """The older style: ``optimizer.replicate()`` averages the gradients
  inside ``apply_gradient`` (no explicit pmean)."""
  return legacy_train_step(optimizer, batch)


def linen_pmap_train_step(state, batch):
  def loss_fn(params):
    return cross_entropy(state.apply_fn({'params': params}, batch['image']),
                         batch['label'])
  loss, grads = jax.value_and_grad(loss_fn)(state.params)
  grads = jax.lax.pmean(grads, 'batch')
  return state.apply_gradients(grads=grads), loss


def linen_stateful_train_step(state, batch):
  def loss_fn(params):
    log_probs, updates = state.apply_fn(
        {'params': params, 'batch_stats': state.batch_stats}, batch['image'],
        mutable=['batch_stats'])
    return cross_entropy(log_probs, batch['label']), updates['batch_stats']
  (loss, batch_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(
      state.params)
  state = state.apply_gradients(grads=grads, batch_stats=batch_stats)
  return state, loss


# --- construction ------------------------------------------------------------

LEARNING_RATE = 0.1
BETA = 0.9


def legacy_optimizer(model):
  return optim.Momentum(learning_rate=LEARNING_RATE, beta=BETA).create(model)


def linen_tx():
  return optax.sgd(LEARNING_RATE, momentum=BETA)


def make_batch(batch_size, image_shape, num_classes=10, seed=0):
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.RandomState(seed)
  return {
      'image': jnp.asarray(rng.randn(batch_size, *image_shape), jnp.float32),
      'label': jnp.asarray(rng.randint(0, num_classes, batch_size), jnp.int32),
  }


def upgraded_cnn_namespace():
  """The legacy CNN program above (model, optimizer, step) after
  ``flaxlegacy upgrade``, executed: its names, plain linen + optax."""
  import inspect  # pylint: disable=g-import-not-at-top
  from flaxlegacy.upgrade import upgrade_source  # pylint: disable=g-import-not-at-top
  src = '\n'.join([
      'from flax import nn', 'from flax import optim', 'import jax',
      'import jax.numpy as jnp',
      f'LEARNING_RATE = {LEARNING_RATE!r}', f'BETA = {BETA!r}',
      inspect.getsource(LegacyCNN), inspect.getsource(cross_entropy),
      inspect.getsource(legacy_train_step),
      inspect.getsource(legacy_optimizer),
      'def build(key):',
      '  _, params = LegacyCNN.init_by_shape(key, '
      '[((1, 28, 28, 1), jnp.float32)])',
      '  return legacy_optimizer(nn.Model(LegacyCNN, params))', ''])
  code, report = upgrade_source(src, '<benchmarks legacy CNN>')
  if report.left:
    raise RuntimeError(f'flaxlegacy upgrade left TODOs: {report.left}')
  namespace = {'__name__': 'upgraded_cnn'}
  exec(compile(code, '<upgraded CNN>', 'exec'), namespace)  # pylint: disable=exec-used
  namespace['__source__'] = code
  return namespace


def build_cnn(variant, batch_size, key=None):
  """(jitted step, state args) for the MNIST CNN: legacy, linen, or
  ``upgraded`` (the legacy program after ``flaxlegacy upgrade``)."""
  key = jax.random.PRNGKey(0) if key is None else key
  batch = make_batch(batch_size, (28, 28, 1))
  if variant == 'upgraded':
    ns = upgraded_cnn_namespace()
    return jax.jit(ns['legacy_train_step']), (ns['build'](key),), batch
  if variant == 'legacy':
    _, params = LegacyCNN.init_by_shape(key, [((1, 28, 28, 1), jnp.float32)])
    optimizer = legacy_optimizer(nn.Model(LegacyCNN, params))
    return jax.jit(legacy_train_step), (optimizer,), batch
  module = LinenCNN()
  params = module.init(key, jnp.ones((1, 28, 28, 1)))['params']
  state = train_state.TrainState.create(apply_fn=module.apply, params=params,
                                        tx=linen_tx())
  return jax.jit(linen_train_step), (state,), batch


def build_resnet(variant, batch_size, name='resnet18', image_size=32,
                 num_filters=64, key=None):
  """(jitted step, state args, batch) for a ResNet with BatchNorm."""
  key = jax.random.PRNGKey(0) if key is None else key
  small = image_size <= 64
  kwargs = resnet_kwargs(name, small, num_filters)
  batch = make_batch(batch_size, (image_size, image_size, 3))
  shape = (1, image_size, image_size, 3)
  if variant == 'legacy':
    with nn.stateful() as model_state:
      _, params = LegacyResNet.partial(**kwargs).init_by_shape(
          key, [(shape, jnp.float32)])
    optimizer = legacy_optimizer(nn.Model(LegacyResNet.partial(**kwargs),
                                          params))
    return (jax.jit(legacy_stateful_train_step), (optimizer, model_state),
            batch)
  module = LinenResNet(**kwargs)
  variables = module.init(key, jnp.ones(shape))
  state = BNTrainState.create(apply_fn=module.apply,
                              params=variables['params'], tx=linen_tx(),
                              batch_stats=variables['batch_stats'])
  return jax.jit(linen_stateful_train_step), (state,), batch


def param_shapes(variant, name, image_size, num_filters, small_inputs=True):
  """The parameter tree of a ResNet as ShapeDtypeStructs (no computation:
  ``jax.eval_shape`` of the init), legacy or linen layout."""
  kwargs = resnet_kwargs(name, small_inputs, num_filters)
  shape = (1, image_size, image_size, 3)
  key = jax.random.PRNGKey(0)
  if variant == 'legacy':
    def init(rng):
      with nn.stateful():
        _, params = LegacyResNet.partial(**kwargs).init_by_shape(
            rng, [(shape, jnp.float32)])
      return params
    return jax.eval_shape(init, key), LegacyResNet.partial(**kwargs)
  module = LinenResNet(**kwargs)
  return jax.eval_shape(
      lambda rng: module.init(rng, jnp.ones(shape))['params'], key), module


# --- the two steps with one calling convention (for program comparison) ----


def flat_step(variant, step, state_args, batch):
  """``step`` as a function of flat arrays in the linen step's order.

  The legacy state flattens as (step, momentum traces, params, ...) -- an
  ``Optimizer`` is (state, target) -- and a ``TrainState`` as (step, params,
  traces, ...).  Both wrappers take and return (step, params, traces, rest,
  [loss]), so that the lowered programs of the two variants can be compared
  as text: same computation, same argument order.  Returns ``(fn, args)``.
  """
  step = getattr(step, '__wrapped__', step)  # the Python function, not jit
  leaves, treedef = jax.tree_util.tree_flatten((state_args, batch))
  if variant == 'legacy':
    n = len(jax.tree_util.tree_leaves(state_args[0].target))
  else:
    n = len(jax.tree_util.tree_leaves(state_args[0].params))

  def to_linen_order(flat):  # legacy (s, T, P, rest) -> (s, P, T, rest)
    flat = list(flat)
    return flat[:1] + flat[1 + n:1 + 2 * n] + flat[1:1 + n] + flat[1 + 2 * n:]

  def to_legacy_order(flat):  # (s, P, T, rest) -> legacy (s, T, P, rest)
    flat = list(flat)
    return flat[:1] + flat[1 + n:1 + 2 * n] + flat[1:1 + n] + flat[1 + 2 * n:]

  if variant != 'legacy':
    to_linen_order = to_legacy_order = list  # noqa: F811

  def fn(*flat):
    state, data = jax.tree_util.tree_unflatten(treedef, to_legacy_order(flat))
    return tuple(to_linen_order(jax.tree_util.tree_leaves(step(*state, data))))
  return fn, tuple(to_linen_order(leaves))
