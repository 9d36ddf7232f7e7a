"""GroupNorm applied with flax <= 0.3.5's parameter layout.

flax 0.3.0-0.3.5 linen stored GroupNorm's ``scale`` and ``bias`` with the
input's rank, ``(1, ..., 1, C)``; 0.3.6 and today's linen store ``(C,)``.
The same file runs under flax 0.3.5 (``record_flax035_group_norm.py``, on
the oracle), where those are the layer's own shapes, and under the
compatibility layer (tests/test_early_linen_group_norm.py).  Inputs and
parameters are fixed closed forms (no random draws), so the numbers depend
only on the layer's arithmetic.

``record(layout)`` applies every case with its parameters in ``layout``
(``'legacy'``: ``(1, ..., 1, C)``; ``'squeezed'``: ``(C,)``) and returns
each output by name.
"""

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn


def _inputs(*shape):
  size = int(np.prod(shape))
  return 2. * np.sin(np.arange(size, dtype=np.float32) * 0.7).reshape(
      shape).astype(np.float32) + 0.5


def _feature(c, phase):
  return np.cos(np.arange(c, dtype=np.float32) * 1.3 + phase).astype(
      np.float32)


class Net(nn.Module):
  """A GroupNorm inside a model (score_sde's ResNet blocks)."""

  @nn.compact
  def __call__(self, x):
    x = nn.GroupNorm(num_groups=2, name='norm')(x)
    return nn.swish(x)


# name -> (module, input shape, parameter path, params present)
CASES = {
    'nhwc': (lambda: nn.GroupNorm(num_groups=3), (2, 4, 3, 6), (),
             ('scale', 'bias')),
    'nc': (lambda: nn.GroupNorm(num_groups=2), (3, 8), (), ('scale', 'bias')),
    'group_size': (lambda: nn.GroupNorm(num_groups=None, group_size=2),
                   (2, 5, 4), (), ('scale', 'bias')),
    'scale_only': (lambda: nn.GroupNorm(num_groups=2, use_bias=False),
                   (2, 3, 3, 4), (), ('scale',)),
    'bias_only': (lambda: nn.GroupNorm(num_groups=2, use_scale=False),
                  (2, 3, 3, 4), (), ('bias',)),
    'in_model_jit': (Net, (2, 4, 4, 4), ('norm',), ('scale', 'bias')),
}


def params(name, layout):
  """The parameters of case ``name`` in ``layout`` (a plain nested dict)."""
  _, shape, path, present = CASES[name]
  c = shape[-1]
  lead = (1,) * (len(shape) - 1) if layout == 'legacy' else ()
  values = {'scale': 1. + 0.25 * _feature(c, 0.), 'bias': 0.1 * _feature(c, 1.)}
  tree = {k: values[k].reshape(lead + (c,)) for k in present}
  for p in reversed(path):
    tree = {p: tree}
  return tree


def apply(name, layout):
  make, shape, _, _ = CASES[name]
  variables = {'params': params(name, layout)}
  x = _inputs(*shape)
  fn = lambda v, x: make().apply(v, x)
  if name.endswith('_jit'):
    fn = jax.jit(fn)
  return np.asarray(fn(variables, jnp.asarray(x)))


def record(layout):
  return {name: apply(name, layout) for name in CASES}
