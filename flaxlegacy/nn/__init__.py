"""Legacy ``flax.nn`` (v0.1.0rc2 - v0.3.6)."""

from flaxlegacy import _activate as _activate_module

_activate_module.activate()
