"""Python names removed since 2020 (served at activation, where absent).

Kept apart from numpy_names: under ``FLAXLEGACY=on`` these are added when
``inspect`` is imported, which NumPy itself does half-way through its own
import, so this module must not import NumPy.
"""

import collections
import inspect


# --- Python names removed since 3.9 ----------------------------------------

# inspect.ArgSpec / getargspec (removed in Python 3.11).
ArgSpec = collections.namedtuple('ArgSpec', 'args varargs keywords defaults')


def getargspec(func):
  """Removed ``inspect.getargspec``: ``ArgSpec(args, varargs, keywords,
  defaults)``; a ValueError for keyword-only parameters or annotations,
  as before (use ``inspect.signature`` for those)."""
  spec = inspect.getfullargspec(func)
  if spec.kwonlyargs or spec.annotations:
    raise ValueError('Function has keyword-only parameters or annotations, '
                     'use inspect.signature() API which can support them')
  return ArgSpec(spec.args, spec.varargs, spec.varkw, spec.defaults)
