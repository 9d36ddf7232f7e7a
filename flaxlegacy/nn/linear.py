"""Legacy ``flax.nn.linear``: Dense, DenseGeneral, Conv, ConvTranspose, Embed.

Each layer creates its parameters through the legacy frame (legacy names,
shapes, initializers and keys) and hands them to the computation of the linen
layer that computes the same function (``_linen_ops``: linen's own code path,
pinned to linen's jaxpr by the tests).  It passes ``dtype`` explicitly, which
gives the legacy cast of inputs and parameters to the computation dtype.
``Embed``'s lookup is the exception (see there).
"""

from collections.abc import Iterable  # pylint: disable=g-importing-member

from jax import lax
import jax.numpy as jnp
import numpy as np

from flaxlegacy.nn import _layer_util
from flaxlegacy.nn import _linen_ops
from flaxlegacy.nn import base
from flaxlegacy.nn import initializers

default_kernel_init = initializers.lecun_normal()

default_embed_init = initializers.variance_scaling(
    1.0, 'fan_in', 'normal', out_axis=0)

def _as_tuple(x):
  return tuple(x) if isinstance(x, Iterable) else (x,)


def _normalize_axes(axes, ndim):
  return tuple(ax if ax >= 0 else ndim + ax for ax in axes)


def _as_array(x):
  # Legacy cast every input with jnp.asarray(x, dtype) first, so nested lists
  # worked; arrays pass through untouched (the cast to dtype is linen's).
  return x if hasattr(x, 'ndim') else jnp.asarray(x)


class Dense(base.Module):
  """A linear transformation applied over the last dimension of the input."""

  def apply(self,
            inputs,
            features,
            bias=True,
            dtype=jnp.float32,
            precision=None,
            kernel_init=default_kernel_init,
            bias_init=initializers.zeros):
    """Applies ``inputs @ kernel + bias`` in ``dtype``.

    Args:
      inputs: the nd-array to transform (any number of leading batch dims).
      features: the number of output features.
      bias: whether to add a bias (default: True).
      dtype: the dtype of the computation (default: float32).
      precision: the ``lax.Precision`` of the matmul.
      kernel_init: initializer of the ``(in_features, features)`` kernel.
      bias_init: initializer of the ``(features,)`` bias.
    Returns:
      The transformed input.
    """
    kernel = self.param('kernel', (jnp.shape(inputs)[-1], features),
                        kernel_init)
    bias = self.param('bias', (features,), bias_init) if bias else None
    return _linen_ops.dense(inputs, kernel, bias, dtype, precision)


def _per_batch_slice(init, n_batch, flat_shape):
  """Legacy DenseGeneral init: ``init`` once per batch slice, same key.

  Legacy called the initializer on the 2-D (or 1-D) per-slice shape, once for
  every element of the batch dims, each time with the same key, and
  concatenated the results.  Linen's DenseGeneral calls it once on the
  flattened batch*contracted shape instead (different values, larger fan-in),
  so the legacy wrapper is kept here.
  """
  def wrapped(key, shape, dtype=jnp.float32):
    size = int(np.prod(shape[:n_batch], dtype=np.int64))
    parts = [init(key, flat_shape, dtype) for _ in range(size)]
    return jnp.reshape(jnp.concatenate(parts, axis=0), shape)
  return wrapped


class DenseGeneral(base.Module):
  """A linear transformation with flexible axes."""

  def apply(self,
            inputs,
            features,
            axis=-1,
            batch_dims=(),
            bias=True,
            dtype=jnp.float32,
            kernel_init=default_kernel_init,
            bias_init=initializers.zeros,
            precision=None):
    """Contracts ``axis`` of the inputs with the kernel, batched over ``batch_dims``.

    Args:
      inputs: the nd-array to transform.
      features: int or tuple of output feature sizes.
      axis: int or tuple of input axes to contract.
      batch_dims: int or tuple of leading batch axes (0, 1, ... in order).
      bias: whether to add a bias (default: True).
      dtype: the dtype of the computation (default: float32).
      kernel_init: initializer of the kernel (called per batch slice).
      bias_init: initializer of the bias (called per batch slice).
      precision: the ``lax.Precision`` of the contraction.
    Returns:
      The transformed input: batch dims + remaining dims + features.
    """
    features, axis = _as_tuple(features), _as_tuple(axis)
    batch_dims = _as_tuple(batch_dims)
    if batch_dims:
      max_dim = np.max(batch_dims)
      if set(batch_dims) != set(range(max_dim + 1)):
        raise _layer_util.layer_error(
            self, ValueError, 'batch_dims %s must be consecutive leading '
            'dimensions starting from 0.' % str(batch_dims))
    inputs = _as_array(inputs)
    shape = inputs.shape
    ndim = len(shape)
    axis = _normalize_axes(axis, ndim)
    batch_dims = _normalize_axes(batch_dims, ndim)
    n_batch = len(batch_dims)
    batch_shape = tuple(shape[ax] for ax in batch_dims)
    contracted = tuple(shape[ax] for ax in axis)
    flat_kernel = (int(np.prod(contracted, dtype=np.int64)),
                   int(np.prod(features, dtype=np.int64)))
    kernel = self.param('kernel', batch_shape + contracted + features,
                        _per_batch_slice(kernel_init, n_batch, flat_kernel))
    if bias:
      bias = self.param('bias', batch_shape + features,
                        _per_batch_slice(bias_init, n_batch, flat_kernel[1:]))
    else:
      bias = None
    # ``axis`` in the caller's order: the kernel's contracted axes are laid
    # out that way (linen sorts ``axis``; same computation when sorted).
    return _linen_ops.dense_general(inputs, kernel, bias, axis, batch_dims,
                                    features, dtype, precision)


def _padding(padding):
  # Legacy handed padding to lax as given, so pairs may be lists; linen's
  # canonicalize_padding wants tuples.
  if isinstance(padding, str):
    return padding
  return [tuple(p) if isinstance(p, (list, tuple)) else p for p in padding]


def _kernel_size(kernel_size):
  # 0.3.0+: an int means a 1-D kernel.  Sequences are accepted too (legacy
  # needed a tuple because it concatenated it with one).
  return (kernel_size,) if isinstance(kernel_size, int) else tuple(kernel_size)


def _conv_dimension_numbers(input_shape):
  """Legacy private helper: channels-last dimension numbers for a conv.

  For an input of rank ``n`` laid out ``(batch, spatial..., features)`` and a
  kernel laid out ``(spatial..., in_features, out_features)``, the
  ``lax.ConvDimensionNumbers`` that ``lax.conv_general_dilated`` takes (the
  output has the input's layout).  Research code built depthwise and custom
  convolutions on it.
  """
  rank = len(input_shape)
  spatial = tuple(range(1, rank - 1))
  lhs = (0, rank - 1) + spatial
  rhs = (rank - 1, rank - 2) + tuple(range(rank - 2))
  return lax.ConvDimensionNumbers(lhs, rhs, lhs)


def _string_padding_with_input_dilation(shape, kernel_size, strides,
                                        kernel_dilation, padding):
  """Explicit pads for ``'SAME'``/``'VALID'`` with ``input_dilation``.

  JAX now rejects string padding together with input (lhs) dilation; the JAX
  of legacy Flax accepted it and computed the pads from the *undilated*
  input size and the dilated kernel size, which is reproduced here.
  """
  n = len(kernel_size)
  spatial = shape[-n - 1:-1]
  kernel_dilation = kernel_dilation or (1,) * n
  effective = [(k - 1) * d + 1 for k, d in zip(kernel_size, kernel_dilation)]
  return lax.padtype_to_pads(spatial, effective, strides or (1,) * n, padding)


class Conv(base.Module):
  """Convolution Module wrapping ``lax.conv_general_dilated``."""

  def apply(self,
            inputs,
            features,
            kernel_size,
            strides=None,
            padding='SAME',
            input_dilation=None,
            kernel_dilation=None,
            feature_group_count=1,
            bias=True,
            dtype=jnp.float32,
            precision=None,
            kernel_init=default_kernel_init,
            bias_init=initializers.zeros):
    """Applies a channels-last convolution.

    Args:
      inputs: ``(batch, spatial..., in_features)``, or without the batch axis.
      features: number of convolution filters.
      kernel_size: tuple of spatial kernel sizes (an int for 1-D).
      strides: sequence of strides (default: ones).
      padding: ``'SAME'``, ``'VALID'`` or a ``(low, high)`` pair per spatial
        dimension.
      input_dilation: ``None`` or a sequence of input dilation factors.
      kernel_dilation: ``None`` or a sequence of kernel dilation factors.
      feature_group_count: number of feature groups (divides in_features).
      bias: whether to add a bias (default: True).
      dtype: the dtype of the computation (default: float32).
      precision: the ``lax.Precision`` of the convolution.
      kernel_init: initializer of the kernel.
      bias_init: initializer of the bias.
    Returns:
      The convolved data.
    """
    kernel_size = _kernel_size(kernel_size)
    inputs = _as_array(inputs)
    in_features = inputs.shape[-1]
    if in_features % feature_group_count != 0:
      # Legacy: a bare ``assert`` (hence AssertionError).
      raise _layer_util.layer_error(
          self, AssertionError,
          f'in_features ({in_features}) must be divisible by '
          f'feature_group_count ({feature_group_count})')
    kernel = self.param(
        'kernel',
        kernel_size + (in_features // feature_group_count, features),
        kernel_init)
    bias = self.param('bias', (features,), bias_init) if bias else None
    if isinstance(padding, str) and input_dilation is not None:
      padding = _string_padding_with_input_dilation(
          inputs.shape, kernel_size, strides, kernel_dilation, padding)
    return _linen_ops.conv(inputs, kernel, bias, kernel_size, strides,
                           _padding(padding), input_dilation, kernel_dilation,
                           feature_group_count, dtype, precision)


class ConvTranspose(base.Module):
  """Transposed convolution Module wrapping ``lax.conv_transpose``."""

  def apply(self,
            inputs,
            features,
            kernel_size,
            strides=None,
            padding='SAME',
            kernel_dilation=None,
            bias=True,
            dtype=jnp.float32,
            precision=None,
            kernel_init=default_kernel_init,
            bias_init=initializers.zeros):
    """Applies a channels-last transposed convolution (``lax.conv_transpose``).

    Args:
      inputs: ``(batch, spatial..., in_features)``, or without the batch axis.
      features: number of convolution filters.
      kernel_size: tuple of spatial kernel sizes (an int for 1-D).
      strides: sequence of strides (default: ones).
      padding: ``'SAME'``, ``'VALID'`` or a ``(low, high)`` pair per spatial
        dimension.
      kernel_dilation: ``None`` or a sequence of kernel dilation factors.
      bias: whether to add a bias (default: True).
      dtype: the dtype of the computation (default: float32).
      precision: the ``lax.Precision`` of the convolution.
      kernel_init: initializer of the kernel.
      bias_init: initializer of the bias.
    Returns:
      The convolved data.
    """
    kernel_size = _kernel_size(kernel_size)
    inputs = _as_array(inputs)
    kernel = self.param('kernel', kernel_size + (inputs.shape[-1], features),
                        kernel_init)
    bias = self.param('bias', (features,), bias_init) if bias else None
    # Legacy: any falsy ``strides`` (None, ()) means ones.
    return _linen_ops.conv_transpose(inputs, kernel, bias, kernel_size,
                                     strides or None, _padding(padding),
                                     kernel_dilation, dtype, precision)


class Embed(base.Module):
  """Embedding Module: a parameterized map from integers to vectors."""

  def apply(self,
            inputs,
            num_embeddings,
            features,
            embedding_init=default_embed_init):
    """Looks up ``embedding[inputs]``.

    Args:
      inputs: integer array; all its dimensions are batch dimensions.
      num_embeddings: number of embeddings (rows of the table).
      features: size of each embedding.
      embedding_init: initializer of the ``(num_embeddings, features)`` table.
    Returns:
      ``inputs.shape + (features,)`` rows of the table, in its dtype.
    """
    inputs = jnp.asarray(inputs)
    if not jnp.issubdtype(inputs.dtype, jnp.integer):
      raise _layer_util.layer_error(
          self, ValueError,
          'Input type must be an integer or unsigned integer.')
    embedding = self.param('embedding', (num_embeddings, features),
                           embedding_init)
    # Not delegated: linen's Embed uses jnp.take, whose 'fill' mode returns
    # NaN rows for ids >= num_embeddings.  Legacy indexed the table, which
    # wraps negative ids once and clamps the rest into range; JAX indexing
    # still does exactly that (jnp.take(mode='clip') would not wrap -1).
    return embedding[inputs]

  @base.module_method
  def attend(self, query, **unused_kwargs):
    """Dot products of ``query`` with every embedding (weight tying).

    Args:
      query: array whose last dimension is the embedding size.
      **unused_kwargs: the apply arguments a partial/shared Embed forwards.
    Returns:
      ``query.shape[:-1] + (num_embeddings,)``.
    """
    del unused_kwargs
    return _linen_ops.embed_attend(query, self.get_param('embedding'))
