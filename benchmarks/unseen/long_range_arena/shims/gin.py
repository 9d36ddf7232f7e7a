"""Stand-in for gin-config (not installed here): the two names
performer_attention.py uses at import, as no-ops (no gin files are read)."""


def external_configurable(fn, name=None, module=None):
  del name, module
  return fn


def configurable(fn=None, **kwargs):
  del kwargs
  if fn is None:
    return lambda f: f
  return fn
