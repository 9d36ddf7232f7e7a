"""Linen recurrent cells for code rewritten by ``flaxlegacy upgrade``.

Plain linen only: importing this module does not activate the compatibility
layer, so upgraded code that uses it runs with ``FLAXLEGACY=off``.

Why they exist.  A legacy cell (``nn.LSTMCell``, ``nn.GRUCell``) has no
``features`` argument: its hidden size is the last dimension of the carry
it is called with.  Linen's cells compute the same function with the same
parameter names and shapes (``ii``, ``if``, ``ig``, ``io`` / ``hi``, ...,
``ir``, ``iz``, ``in`` / ``hr``, ``hz``, ``hn``), but ``features`` is a
required field.  Where the upgrade cannot tell the hidden size at the place
the cell is constructed (the carry often arrives as an argument), it uses
these subclasses: ``features`` may be left out, and the hidden size comes
from the carry, as in legacy.  Given, it is checked against the carry.

``initialize_carry`` keeps linen's signature (``rng, input_shape``) and
needs ``features``; the upgrade rewrites the legacy static
``initialize_carry(rng, batch_dims, size)`` into linen's form on a cell
constructed with ``features=size``.

``ConvLSTM`` is flax 0.3 linen's name of today's ``ConvLSTMCell`` (same
fields, computation and parameters): a subclass of that name, so that an
unnamed cell keeps flax 0.3's auto-name ``ConvLSTM_0``.  It is also what
legacy processes get as ``flax.linen.ConvLSTM`` (``_names``), hence the
import of the ``recurrent`` submodule: it works while ``flax.linen`` itself
is still being imported.
"""

from typing import Optional

from flax.linen import recurrent as linen_recurrent


def _hidden(features, h, cls):
  size = h.shape[-1]
  if features is not None and features != size:
    raise ValueError(f'{cls}: features={features} but the carry has hidden '
                     f'size {size}')
  return size


class LSTMCell(linen_recurrent.LSTMCell):
  """``nn.LSTMCell`` whose ``features`` defaults to the carry's size."""
  features: Optional[int] = None

  def __call__(self, carry, inputs):
    _hidden(self.features, carry[1], 'LSTMCell')
    return super().__call__(carry, inputs)


class OptimizedLSTMCell(linen_recurrent.OptimizedLSTMCell):
  """``nn.OptimizedLSTMCell`` whose ``features`` defaults to the carry's."""
  features: Optional[int] = None

  def __call__(self, carry, inputs):
    _hidden(self.features, carry[1], 'OptimizedLSTMCell')
    return super().__call__(carry, inputs)


class GRUCell(linen_recurrent.GRUCell):
  """``nn.GRUCell`` whose ``features`` defaults to the carry's size."""
  features: Optional[int] = None

  def __call__(self, carry, inputs):
    _hidden(self.features, carry, 'GRUCell')
    return super().__call__(carry, inputs)


class ConvLSTM(linen_recurrent.ConvLSTMCell):
  """flax 0.3 linen's ``ConvLSTM``: today's ``ConvLSTMCell``, same name."""
