"""Legacy ``flax.nn.recurrent``: LSTMCell, OptimizedLSTMCell, GRUCell, ConvLSTM.

Cells are modules ``(carry, inputs) -> (new_carry, output)`` meant as
``lax.scan`` bodies; ``initialize_carry`` is a static method (no module
needed).

``LSTMCell``, ``GRUCell`` and ``ConvLSTM`` keep the legacy composition of
named ``Dense``/``Conv`` children (``ii``, ``hf``, ``ih`` ...), so parameter
trees, keys and the outputs that ``capture_module_outputs``/``truncate_at``
see at those paths are legacy's; every matmul/convolution is therefore the
linen layer's, and the gate equations are the lines linen's cells evaluate.
``OptimizedLSTMCell``, whose children only create parameters, runs linen's
``OptimizedLSTMCell`` computation (``_linen_ops.optimized_lstm``).
"""

import abc

from jax import random
import jax.numpy as jnp

from flaxlegacy.nn import _linen_ops
from flaxlegacy.nn import activation
from flaxlegacy.nn import base
from flaxlegacy.nn import initializers
from flaxlegacy.nn import linear


class RNNCellBase(base.Module):
  """RNN cell base class."""

  @staticmethod
  @abc.abstractmethod
  def initialize_carry(rng, batch_dims, size, init_fn=initializers.zeros):
    """The initial carry for ``batch_dims`` and memory ``size``."""


def _two_carries(rng, shape, init_fn):
  key1, key2 = random.split(rng)
  return init_fn(key1, shape), init_fn(key2, shape)


class LSTMCell(RNNCellBase):
  """LSTM cell."""

  def apply(self, carry, inputs,
            gate_fn=activation.sigmoid, activation_fn=activation.tanh,
            kernel_init=linear.default_kernel_init,
            recurrent_kernel_init=initializers.orthogonal(),
            bias_init=initializers.zeros):
    r"""One LSTM step.

    .. math::
        i = \sigma(W_{ii} x + W_{hi} h + b_{hi}),\quad
        f = \sigma(W_{if} x + W_{hf} h + b_{hf}),\\
        g = \tanh(W_{ig} x + W_{hg} h + b_{hg}),\quad
        o = \sigma(W_{io} x + W_{ho} h + b_{ho}),\\
        c' = f c + i g,\quad h' = o \tanh(c').

    Args:
      carry: ``(c, h)`` from ``LSTMCell.initialize_carry``.
      inputs: the input of this step (leading dims are batch dims).
      gate_fn: gate activation (default: sigmoid).
      activation_fn: cell/output activation (default: tanh).
      kernel_init: initializer of the input kernels.
      recurrent_kernel_init: initializer of the recurrent kernels.
      bias_init: initializer of the (recurrent) biases.
    Returns:
      ``((c', h'), h')``.
    """
    c, h = carry
    hidden = h.shape[-1]
    dense_h = linear.Dense.partial(
        inputs=h, features=hidden, bias=True,
        kernel_init=recurrent_kernel_init, bias_init=bias_init)
    dense_i = linear.Dense.partial(
        inputs=inputs, features=hidden, bias=False, kernel_init=kernel_init)
    i = gate_fn(dense_i(name='ii') + dense_h(name='hi'))
    f = gate_fn(dense_i(name='if') + dense_h(name='hf'))
    g = activation_fn(dense_i(name='ig') + dense_h(name='hg'))
    o = gate_fn(dense_i(name='io') + dense_h(name='ho'))
    new_c = f * c + i * g
    new_h = o * activation_fn(new_c)
    return (new_c, new_h), new_h

  @staticmethod
  def initialize_carry(rng, batch_dims, size, init_fn=initializers.zeros):
    """``(c, h)``, each ``init_fn(k, batch_dims + (size,))`` with split keys."""
    return _two_carries(rng, tuple(batch_dims) + (size,), init_fn)


class OptimizedLSTMCell(RNNCellBase):
  """LSTM cell with the kernels concatenated (parameters as ``LSTMCell``)."""

  class DummyDense(base.Module):
    """Creates the parameters of a ``Dense`` child and returns them.

    Without ``bias`` the second value is ``None`` (legacy returned an unused
    zeros vector: dead operations in every traced step).
    """

    def apply(self, inputs, features, kernel_init, bias_init, bias=True):
      kernel = self.param('kernel', (inputs.shape[-1], features), kernel_init)
      if bias:
        return kernel, self.param('bias', (features,), bias_init)
      return kernel, None

  def apply(self, carry, inputs,
            gate_fn=activation.sigmoid, activation_fn=activation.tanh,
            kernel_init=linear.default_kernel_init,
            recurrent_kernel_init=initializers.orthogonal(),
            bias_init=initializers.zeros):
    """One LSTM step with one matmul for the inputs, one for the carry.

    Args:
      carry: ``(c, h)`` from ``initialize_carry``.
      inputs: the input of this step.
      gate_fn: gate activation (default: sigmoid).
      activation_fn: cell/output activation (default: tanh).
      kernel_init: initializer of the input kernels.
      recurrent_kernel_init: initializer of the recurrent kernels.
      bias_init: initializer of the recurrent biases.
    Returns:
      ``((c', h'), h')``.
    """
    _, h = carry
    hidden = h.shape[-1]
    input_kernels, hidden_kernels, hidden_biases = [], [], []
    for gate in 'ifgo':
      kernel, _ = OptimizedLSTMCell.DummyDense(
          inputs, hidden, kernel_init, bias_init, bias=False,
          name='i' + gate)
      input_kernels.append(kernel)
      kernel, bias = OptimizedLSTMCell.DummyDense(
          h, hidden, recurrent_kernel_init, bias_init, bias=True,
          name='h' + gate)
      hidden_kernels.append(kernel)
      hidden_biases.append(bias)
    return _linen_ops.optimized_lstm(carry, inputs, input_kernels,
                                     hidden_kernels, hidden_biases, gate_fn,
                                     activation_fn)

  @staticmethod
  def initialize_carry(rng, batch_dims, size, init_fn=initializers.zeros):
    """``(c, h)``, each ``init_fn(k, batch_dims + (size,))`` with split keys."""
    return _two_carries(rng, tuple(batch_dims) + (size,), init_fn)


class GRUCell(RNNCellBase):
  """GRU cell."""

  def apply(self, carry, inputs,
            gate_fn=activation.sigmoid, activation_fn=activation.tanh,
            kernel_init=linear.default_kernel_init,
            recurrent_kernel_init=initializers.orthogonal(),
            bias_init=initializers.zeros):
    r"""One GRU step.

    .. math::
        r = \sigma(W_{ir} x + b_{ir} + W_{hr} h),\quad
        z = \sigma(W_{iz} x + b_{iz} + W_{hz} h),\\
        n = \tanh(W_{in} x + b_{in} + r (W_{hn} h + b_{hn})),\quad
        h' = (1 - z) n + z h.

    Args:
      carry: ``h`` from ``GRUCell.initialize_carry``.
      inputs: the input of this step.
      gate_fn: gate activation (default: sigmoid).
      activation_fn: candidate activation (default: tanh).
      kernel_init: initializer of the input kernels.
      recurrent_kernel_init: initializer of the recurrent kernels.
      bias_init: initializer of the biases.
    Returns:
      ``(h', h')``.
    """
    h = carry
    hidden = h.shape[-1]
    dense_h = linear.Dense.partial(
        inputs=h, features=hidden, bias=False,
        kernel_init=recurrent_kernel_init, bias_init=bias_init)
    dense_i = linear.Dense.partial(
        inputs=inputs, features=hidden, bias=True, kernel_init=kernel_init,
        bias_init=bias_init)
    r = gate_fn(dense_i(name='ir') + dense_h(name='hr'))
    z = gate_fn(dense_i(name='iz') + dense_h(name='hz'))
    n = activation_fn(dense_i(name='in') + r * dense_h(name='hn', bias=True))
    new_h = (1. - z) * n + z * h
    return new_h, new_h

  @staticmethod
  def initialize_carry(rng, batch_dims, size, init_fn=initializers.zeros):
    """``init_fn(rng, batch_dims + (size,))`` (one key, no split)."""
    return init_fn(rng, tuple(batch_dims) + (size,))


class ConvLSTM(RNNCellBase):
  """Convolutional LSTM cell (Shi et al. 2015).

  The forget gate gets ``+1`` at apply time (Jozefowicz et al. 2015).
  """

  def apply(self, carry, inputs, features, kernel_size, strides=None,
            padding='SAME', bias=True, dtype=jnp.float32):
    """One ConvLSTM step.

    Args:
      carry: ``(c, h)`` from ``ConvLSTM.initialize_carry``.
      inputs: ``(batch, spatial..., channels)``.
      features: number of filters of the cell (carry channels).
      kernel_size: spatial kernel size.
      strides: convolution strides.
      padding: ``'SAME'``, ``'VALID'`` or explicit pairs.
      bias: whether the convolutions have biases.
      dtype: dtype of the computation.
    Returns:
      ``((c', h'), h')``.
    """
    c, h = carry
    conv = linear.Conv.partial(features=4 * features, kernel_size=kernel_size,
                               strides=strides, padding=padding, bias=bias,
                               dtype=dtype)
    gates = conv(inputs, name='ih') + conv(h, name='hh')
    # Legacy gate order along the channels: i, g, f, o.
    i, g, f, o = jnp.split(gates, indices_or_sections=4, axis=-1)
    f = activation.sigmoid(f + 1)
    new_c = f * c + activation.sigmoid(i) * jnp.tanh(g)
    new_h = activation.sigmoid(o) * jnp.tanh(new_c)
    return (new_c, new_h), new_h

  @staticmethod
  def initialize_carry(rng, batch_dims, size, init_fn=initializers.zeros):
    """``(c, h)`` of shape ``batch_dims + size`` (size = spatial + features)."""
    return _two_carries(rng, tuple(batch_dims) + tuple(size), init_fn)
