"""Errors of the legacy layers (not legacy API).

A layer-specific error keeps legacy's exception type and message (legacy
tests match on the message) and appends the path of the module that raised
it, so a failing layer deep inside a model is found at once.
"""


def where(module):
  """The path of the executing legacy module (e.g. ``'/encoder/Dense_0'``)."""
  frame = getattr(module, '_frame', None)
  path = getattr(frame, 'path', None)
  return path if path is not None else '?'


def layer_error(module, exc_type, message):
  """``exc_type`` whose text is legacy's ``message`` plus the module path."""
  return exc_type(f'{message} (in module {where(module)})')
