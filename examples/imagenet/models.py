"""ResNet v1 in legacy Flax (``flax.nn``), from ResNet-10 to ResNet-200.

ResNet-18/34 (and the small ResNet-10 used by the tests) stack basic blocks
of two 3x3 convolutions; ResNet-50 and deeper stack bottleneck blocks
(1x1, 3x3, 1x1 with 4x expansion).  BatchNorm keeps its running averages in
the ``nn.stateful`` collection; with ``axis_name`` set (``'batch'`` under
``jax.pmap``) the batch statistics are averaged across devices.
"""

from flax import nn

import jax.numpy as jnp

# Blocks per stage, and whether the stages use bottleneck blocks.
STAGE_SIZES = {
    10: ([1, 1, 1, 1], False),
    18: ([2, 2, 2, 2], False),
    34: ([3, 4, 6, 3], False),
    50: ([3, 4, 6, 3], True),
    101: ([3, 4, 23, 3], True),
    152: ([3, 8, 36, 3], True),
    200: ([3, 24, 36, 3], True),
}


def _norm(train, axis_name, dtype):
  return nn.BatchNorm.partial(use_running_average=not train, momentum=0.9,
                              epsilon=1e-5, axis_name=axis_name, dtype=dtype)


class BasicBlock(nn.Module):
  """Two 3x3 convolutions and a (projected) shortcut."""

  def apply(self, x, filters, strides=(1, 1), train=True, axis_name=None,
            dtype=jnp.float32):
    norm = _norm(train, axis_name, dtype)
    conv = nn.Conv.partial(bias=False, dtype=dtype)
    shortcut = x
    if x.shape[-1] != filters or strides != (1, 1):
      shortcut = conv(x, filters, (1, 1), strides, name='proj_conv')
      shortcut = norm(shortcut, name='proj_bn')
    y = conv(x, filters, (3, 3), strides, name='conv1')
    y = nn.relu(norm(y, name='bn1'))
    y = conv(y, filters, (3, 3), name='conv2')
    # Zero-initialised last scale: each block starts as the identity.
    y = norm(y, name='bn2', scale_init=nn.initializers.zeros)
    return nn.relu(shortcut + y)


class BottleneckBlock(nn.Module):
  """1x1 reduce, 3x3, 1x1 expand (x4), and a (projected) shortcut."""

  def apply(self, x, filters, strides=(1, 1), train=True, axis_name=None,
            dtype=jnp.float32):
    norm = _norm(train, axis_name, dtype)
    conv = nn.Conv.partial(bias=False, dtype=dtype)
    shortcut = x
    if x.shape[-1] != filters * 4 or strides != (1, 1):
      shortcut = conv(x, filters * 4, (1, 1), strides, name='proj_conv')
      shortcut = norm(shortcut, name='proj_bn')
    y = conv(x, filters, (1, 1), name='conv1')
    y = nn.relu(norm(y, name='bn1'))
    y = conv(y, filters, (3, 3), strides, name='conv2')
    y = nn.relu(norm(y, name='bn2'))
    y = conv(y, filters * 4, (1, 1), name='conv3')
    y = norm(y, name='bn3', scale_init=nn.initializers.zeros)
    return nn.relu(shortcut + y)


class ResNet(nn.Module):
  """ResNet v1; returns log-probabilities over ``num_classes``."""

  def apply(self, x, num_classes, num_layers=50, num_filters=64, train=True,
            axis_name=None, dtype=jnp.float32):
    if num_layers not in STAGE_SIZES:
      raise ValueError(f'num_layers={num_layers}: choose one of '
                       f'{sorted(STAGE_SIZES)}')
    stage_sizes, bottleneck = STAGE_SIZES[num_layers]
    block = BottleneckBlock if bottleneck else BasicBlock
    x = nn.Conv(x, num_filters, (7, 7), (2, 2), padding=[(3, 3), (3, 3)],
                bias=False, dtype=dtype, name='init_conv')
    x = _norm(train, axis_name, dtype)(x, name='init_bn')
    x = nn.relu(x)
    x = nn.max_pool(x, (3, 3), strides=(2, 2), padding='SAME')
    for stage, num_blocks in enumerate(stage_sizes):
      for i in range(num_blocks):
        strides = (2, 2) if stage > 0 and i == 0 else (1, 1)
        x = block(x, num_filters * 2 ** stage, strides=strides, train=train,
                  axis_name=axis_name, dtype=dtype)
    x = jnp.mean(x, axis=(1, 2))
    x = nn.Dense(x, num_classes, dtype=dtype)
    # Log-probabilities in float32 even under half precision.
    return nn.log_softmax(jnp.asarray(x, jnp.float32))
