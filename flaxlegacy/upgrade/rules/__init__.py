"""One module per legacy concept; ``modules.py`` drives the per-class ones.

* ``jax_names``: removed JAX, NumPy, ``jax.numpy`` and Python names, and
  keywords JAX renamed (from flaxlegacy/_names.py's table).
* ``imports``: ``from flax import nn`` -> ``from flax import linen as nn``.
* ``layers``: legacy layer calls -> linen construction + call (the table).
* ``modules``: legacy Module classes / ``@nn.module`` functions -> linen
  dataclass modules (fields, ``@nn.compact __call__``, ``self.param``,
  ``self.state``, ``nn.dropout`` / ``make_rng``, ``partial`` / ``shared``,
  legacy auto-names).
"""
