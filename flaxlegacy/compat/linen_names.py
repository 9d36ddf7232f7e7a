"""flax 0.3.x linen names that today's linen renamed (served where absent).

``flax.linen.ConvLSTM`` (flax 0.3) is ``ConvLSTMCell`` since flax 0.6.4:
same fields, same computation, same parameters.  It is served as a
subclass named ``ConvLSTM`` so that an unnamed cell is auto-named
``ConvLSTM_0``, as in flax 0.3 (the auto-name is the class name), and
parameter trees of the time keep their paths.  The flax 0.3 static
``ConvLSTM.initialize_carry(rng, batch_dims, size)`` comes with the
``carries`` behaviour (``flaxlegacy/compat/early_linen.py``).
"""

from flax.linen import recurrent as _recurrent


class ConvLSTM(_recurrent.ConvLSTMCell):
  """``flax.linen.ConvLSTM`` of flax 0.3: today's ``ConvLSTMCell``."""
