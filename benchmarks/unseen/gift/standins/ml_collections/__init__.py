"""Stand-in for ml_collections.ConfigDict (attribute dict with .get)."""


class ConfigDict(dict):
  """The subset gift uses: attribute reads and writes, ``get``, nesting."""

  def __init__(self, d=None, **kw):
    super().__init__()
    for k, v in dict(d or {}, **kw).items():
      self[k] = ConfigDict(v) if isinstance(v, dict) else v

  def __getattr__(self, name):
    try:
      return self[name]
    except KeyError:
      raise AttributeError(name) from None

  def __setattr__(self, name, value):
    self[name] = value
