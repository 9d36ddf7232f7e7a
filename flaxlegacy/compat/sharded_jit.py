"""``jax.interpreters.sharded_jit`` as 2021 code used it (removed in jax 0.3.16).

2021 model code (flaxformer, T5X's predecessors) imported it for one name,
``PartitionSpec``, to annotate activations and parameters; the class lives
on as ``jax.sharding.PartitionSpec`` (same constructor: one entry per array
axis, a mesh axis name or None).  Served by the import hook for ``from
jax.interpreters import sharded_jit`` (only where JAX has no such module).
The ``sharded_jit`` transformation itself was replaced by ``pjit`` /
``jax.jit`` with shardings and is not served: other names raise an
AttributeError that says so.
"""

from jax.sharding import PartitionSpec


def __getattr__(name):
  raise AttributeError(
      f'jax.interpreters.sharded_jit.{name} was removed from JAX (0.3.16); '
      'flaxlegacy serves only PartitionSpec (jax.sharding.PartitionSpec). '
      'Today: jax.jit with in_shardings / out_shardings, '
      'jax.lax.with_sharding_constraint.')
