"""Linen's layer computations as plain functions of (inputs, parameters).

Each function is the body of the named ``flax.linen`` layer after its
parameter lookups -- the same linen helpers (``promote_dtype``,
``canonicalize_padding``) and the same ``lax`` calls in the same order -- so a
legacy layer that calls it computes exactly what the linen layer computes.
``tests/test_nn_layers.py`` pins this: for every layer the jaxpr of the legacy
layer equals the jaxpr of the linen layer's ``apply`` on the same parameters.

Why not ``LinenLayer(...).apply({'params': p}, x)`` itself: linen re-validates
each existing parameter on every apply by tracing its initializer
(``jax.eval_shape`` plus a PRNG key) -- about 4 ms per parameter, paid on
every legacy ``init`` (the legacy frame creates the parameters, then the
output is computed) and on every eager call, which made legacy ``init`` ~1.4x
linen's own.  The legacy frame has already checked the shapes.
"""

from flax.linen import dtypes as linen_dtypes
from flax.linen import linear as linen_linear
from jax import lax
import jax.numpy as jnp
import numpy as np

promote_dtype = linen_dtypes.promote_dtype


def _conv_dimension_numbers(input_shape):
  """Channels-last input/output, (spatial..., in, out) kernel."""
  ndim = len(input_shape)
  lhs_spec = (0, ndim - 1) + tuple(range(1, ndim - 1))
  rhs_spec = (ndim - 1, ndim - 2) + tuple(range(0, ndim - 2))
  return lax.ConvDimensionNumbers(lhs_spec, rhs_spec, lhs_spec)


def _broadcast(x, rank):
  """``None`` -> ones, int -> repeated, sequence -> tuple (linen's rule)."""
  if x is None:
    x = 1
  if isinstance(x, int):
    return (x,) * rank
  return tuple(x)


def dense(inputs, kernel, bias, dtype, precision):
  """``linen.Dense``."""
  inputs, kernel, bias = promote_dtype(inputs, kernel, bias, dtype=dtype)
  y = lax.dot_general(inputs, kernel, (((inputs.ndim - 1,), (0,)), ((), ())),
                      precision=precision)
  if bias is not None:
    y += jnp.reshape(bias, (1,) * (y.ndim - 1) + (-1,))
  return y


def dense_general(inputs, kernel, bias, axis, batch_dims, features, dtype,
                  precision):
  """``linen.DenseGeneral`` with normalised ``axis``/``batch_dims``.

  ``axis`` keeps the caller's order: kernel axis ``len(batch_dims) + j``
  contracts with input axis ``axis[j]`` (legacy's layout; linen sorts
  ``axis`` first, which is the same computation when it is sorted).
  """
  n_batch = len(batch_dims)
  batch_ind = tuple(range(n_batch))
  contract_ind = tuple(range(n_batch, n_batch + len(axis)))
  expanded_batch_shape = tuple(
      inputs.shape[ax] if ax in batch_dims else 1
      for ax in range(inputs.ndim) if ax not in axis)
  inputs, kernel, bias = promote_dtype(inputs, kernel, bias, dtype=dtype)
  out = lax.dot_general(inputs, kernel,
                        ((axis, contract_ind), (batch_dims, batch_ind)),
                        precision=precision)
  if bias is not None:
    out += jnp.reshape(bias, expanded_batch_shape + features)
  return out


def _flatten_batch(inputs, kernel_size):
  """Linen's single leading batch axis (added when absent, merged if many)."""
  num_batch = inputs.ndim - (len(kernel_size) + 1)
  if num_batch != 1:
    batch_shape = inputs.shape[:num_batch]
    inputs = jnp.reshape(inputs, (-1,) + inputs.shape[num_batch:])
    return inputs, batch_shape
  return inputs, None


def conv(inputs, kernel, bias, kernel_size, strides, padding, input_dilation,
         kernel_dilation, feature_group_count, dtype, precision):
  """``linen.Conv`` (shared weights; 'SAME', 'VALID' or explicit pads)."""
  inputs, batch_shape = _flatten_batch(inputs, kernel_size)
  rank = len(kernel_size)
  strides = _broadcast(strides, rank)
  input_dilation = _broadcast(input_dilation, rank)
  kernel_dilation = _broadcast(kernel_dilation, rank)
  padding = linen_linear.canonicalize_padding(padding, rank)
  dimension_numbers = _conv_dimension_numbers(inputs.shape)
  inputs, kernel, bias = promote_dtype(inputs, kernel, bias, dtype=dtype)
  y = lax.conv_general_dilated(
      inputs, kernel, strides, padding, lhs_dilation=input_dilation,
      rhs_dilation=kernel_dilation, dimension_numbers=dimension_numbers,
      feature_group_count=feature_group_count, precision=precision)
  if bias is not None:
    y += bias.reshape((1,) * (y.ndim - bias.ndim) + bias.shape)
  if batch_shape is not None:
    y = jnp.reshape(y, batch_shape + y.shape[1:])
  return y


def conv_transpose(inputs, kernel, bias, kernel_size, strides, padding,
                   kernel_dilation, dtype, precision):
  """``linen.ConvTranspose`` (``transpose_kernel=False``)."""
  inputs, batch_shape = _flatten_batch(inputs, kernel_size)
  rank = len(kernel_size)
  strides = _broadcast(strides, rank)
  kernel_dilation = _broadcast(kernel_dilation, rank)
  padding = linen_linear.canonicalize_padding(padding, rank)
  inputs, kernel, bias = promote_dtype(inputs, kernel, bias, dtype=dtype)
  y = lax.conv_transpose(inputs, kernel, strides, padding,
                         rhs_dilation=kernel_dilation, transpose_kernel=False,
                         precision=precision, preferred_element_type=None)
  if bias is not None:
    y += jnp.reshape(bias, (1,) * (y.ndim - 1) + (-1,))
  if batch_shape is not None:
    y = jnp.reshape(y, batch_shape + y.shape[1:])
  return y


def embed_attend(query, embedding):
  """``linen.Embed.attend`` (``dtype=None``: promote query and table)."""
  query, embedding = promote_dtype(query, embedding, dtype=None)
  return jnp.dot(query, embedding.T)


def _concat_dense(inputs, kernels, biases, dtype):
  kernel = jnp.concatenate(kernels, axis=-1)
  bias = None if biases is None else jnp.concatenate(biases, axis=-1)
  inputs, kernel, bias = promote_dtype(inputs, kernel, bias, dtype=dtype)
  y = jnp.dot(inputs, kernel)
  if bias is not None:
    y += jnp.reshape(bias, (1,) * (y.ndim - 1) + (-1,))
  split_indices = np.cumsum([k.shape[-1] for k in kernels[:-1]])
  return jnp.split(y, split_indices, axis=-1)


def optimized_lstm(carry, inputs, input_kernels, hidden_kernels,
                   hidden_biases, gate_fn, activation_fn, dtype=None):
  """``linen.OptimizedLSTMCell``; kernels/biases in gate order i, f, g, o."""
  c, h = carry
  hi, hf, hg, ho = _concat_dense(h, hidden_kernels, hidden_biases, dtype)
  ii, if_, ig, io = _concat_dense(inputs, input_kernels, None, dtype)
  i = gate_fn(hi + ii)
  f = gate_fn(hf + if_)
  g = activation_fn(hg + ig)
  o = gate_fn(ho + io)
  new_c = f * c + i * g
  new_h = o * activation_fn(new_c)
  return (new_c, new_h), new_h
