"""Legacy ``flax.nn.initializers``: re-exports of ``jax.nn.initializers``.

Legacy Flax re-exported JAX's initializers unchanged, and so do we: the
objects are the very functions ``flax.linen.initializers`` uses, so a legacy
layer and its linen counterpart draw identical values from identical keys.
``delta_orthogonal`` appeared in v0.2.2.

Dtype: the JAX functions default to the default float type (float32 unless
``jax_enable_x64`` is on).  Legacy JAX defaulted to float32 outright; with x64
off the two agree (see docs/decisions.md, "flax.nn layers").
"""

# pylint: disable=unused-import
from jax.nn.initializers import delta_orthogonal
from jax.nn.initializers import kaiming_normal
from jax.nn.initializers import kaiming_uniform
from jax.nn.initializers import lecun_normal
from jax.nn.initializers import lecun_uniform
from jax.nn.initializers import normal
from jax.nn.initializers import ones
from jax.nn.initializers import orthogonal
from jax.nn.initializers import uniform
from jax.nn.initializers import variance_scaling
from jax.nn.initializers import xavier_normal
from jax.nn.initializers import xavier_uniform
from jax.nn.initializers import zeros
