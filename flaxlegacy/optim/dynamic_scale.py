"""Legacy ``flax.optim.dynamic_scale`` (Decision D8).

flax 0.12.8's ``flax.training.dynamic_scale.DynamicScale`` is the legacy
class (same fields, state dict ``{'fin_steps', 'scale'}`` and
``value_and_grad`` result) plus a trailing ``minimum_scale`` field and two
clamps at the float32 range limits; it is served as is.
"""

from typing import Any

from flax.training.dynamic_scale import DynamicScale
from flax.training.dynamic_scale import DynamicScaleResult

__all__ = ['DynamicScale', 'DynamicScaleResult']

# Legacy module-level type alias (annotations of DynamicScaleResult).
Array = Any
