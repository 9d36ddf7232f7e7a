"""One module per legacy concept; ``modules.py`` drives the per-class ones.

* ``jax_names``: removed JAX, NumPy, ``jax.numpy`` and Python names, and
  keywords JAX renamed (from flaxlegacy/_names.py's table).
* ``imports``: ``from flax import nn`` -> ``from flax import linen as nn``.
* legacy layer calls -> linen construction + call: the table is
  flaxlegacy/upgrade/layer_table.py, the rewrite the rewriter's.
* ``modules``: legacy Module classes / ``@nn.module`` functions -> linen
  dataclass modules (fields, ``@nn.compact __call__``, ``self.param``,
  ``self.state``, ``nn.dropout`` / ``make_rng``, ``partial`` / ``shared``,
  legacy auto-names), with ``rewriter`` (a file's ``Upgrader``),
  ``apply_rewriter`` (a module body's ``ApplyRewriter``, its call cases one
  module per concept in ``apply/``), ``resolver`` (what a callee denotes),
  ``partials`` (``X.partial``), ``constructors`` (how a module reference is
  constructed), ``name_plan`` (legacy auto-names) and ``_shared`` (``Ref``
  and the names several rules need).

The rules import each other downwards only (cst_util.py lists the layers):
the facts they read come from facts.py and collectors/, never from a rule.
"""
