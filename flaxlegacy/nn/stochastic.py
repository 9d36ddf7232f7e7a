"""Stochastic contexts (legacy ``flax.nn.stochastic``).

``with nn.stochastic(rng):`` opens a PRNG frame; inside it every
``nn.make_rng()`` returns ``fold_in(rng, n)`` for n = 1, 2, ... (one ordered
counter per context, shared by everything that runs in it: keys depend on
call order, not on module names).  ``nn.dropout`` draws its key there.

Note on the package: ``flaxlegacy.nn.stochastic`` (the attribute of the
package) is the context-manager *function*, as in legacy Flax; this
submodule is reached through ``import flax.nn.stochastic`` / ``sys.modules``.
"""

import contextlib

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from flaxlegacy.nn import utils

_prng_stack = utils.CallStack()

# One dispatch instead of one per inner primitive of an eager fold_in.
_fold_in = jax.jit(jax.random.fold_in)


class _PRNGFrame:
  """One ``nn.stochastic`` context: a base key and the count of keys drawn."""

  __slots__ = ('base_rng', 'counter', 'level')

  def __init__(self, rng):
    self.base_rng = rng
    self.counter = 0
    # Legacy kept the trace level to forbid make_rng inside transformations;
    # the check has been a no-op since v0.2 (levels always compare equal).
    self.level = utils._trace_level(utils._current_trace())  # pylint: disable=protected-access

  def make_rng(self):
    # The counter advances before folding: the first key is fold_in(rng, 1).
    # Under jit it advances at trace time only (faithful legacy behaviour).
    self.counter += 1
    return _fold_in(self.base_rng, np.uint32(self.counter))


@contextlib.contextmanager
def stochastic(rng):
  """Context in which ``make_rng()`` derives fresh keys from ``rng``.

  Yields:
    None.
  """
  with _prng_stack.frame(_PRNGFrame(rng)):
    yield


def is_stochastic():
  """Whether an ``nn.stochastic`` context is active."""
  return bool(_prng_stack)


def make_rng():
  """A new key from the innermost ``nn.stochastic`` context."""
  if not _prng_stack:
    raise ValueError('Use the `nn.stochastic()` context manager to enable'
                     ' stochastic computations.')
  return _prng_stack[-1].make_rng()


def dropout(inputs, rate, deterministic=False, rng=None):
  """Legacy ``nn.dropout``: zero each element with probability ``rate``.

  Kept elements are scaled by ``1 / (1 - rate)``; the mask has the full shape
  of ``inputs`` and its key is ``rng`` or the next ``make_rng()``.  Written
  here rather than delegated to ``linen.Dropout`` because the key comes from
  the ``nn.stochastic`` counter and ``rate == 1`` is not special-cased.
  """
  if rate == 0.:
    return inputs
  keep_prob = 1. - rate
  if deterministic:
    return inputs
  if rng is None:
    rng = make_rng()
  mask = jax.random.bernoulli(rng, p=keep_prob, shape=inputs.shape)
  return lax.select(mask, inputs / keep_prob, jnp.zeros_like(inputs))
