"""Legacy ``flax.optim`` (v0.1.0rc2 - v0.5.3)."""

from flaxlegacy import _activate as _activate_module

_activate_module.activate()
