"""JAX names gfsa (2021) uses that today's JAX and the oracle's jax 0.4.13
lack (ours, not gfsa's).  Imported by drive_gfsa.py before gfsa, on every
side; each name is set only where the running JAX (or a layer) has none.
gfsa's own module-level registration of a ``force_physical_layout``
primitive (xla translation rules, a 5-argument ``lax.cond``) needs these to
import; the driver then replaces that layout hint by the identity (its value
is the identity by construction)."""
import types

import jax
import jax.numpy as jnp


def _set(obj, name, value):
  if not hasattr(obj, name):
    setattr(obj, name, value)


class _Index:

  def __getitem__(self, idx):
    return idx


class _Placeholder:
  pass


_set(jax.config, 'enable_omnistaging', lambda: None)
_set(jnp, 'DeviceArray', jax.Array)
_set(jax.lax, 'tie_in', lambda x, y: y)
_set(jax.ops, 'index', _Index())
_set(jax.ops, 'index_add', lambda x, idx, y: x.at[idx].add(y))
_set(jax.nn, 'normalize', getattr(jax.nn, 'standardize', None))
_set(jax, 'tree_map', jax.tree_util.tree_map)
_set(jax, 'tree_leaves', jax.tree_util.tree_leaves)
if not hasattr(jax.core, 'Primitive'):
  from jax.extend import core as _ext_core
  jax.core.Primitive = _ext_core.Primitive
_set(jax.core, 'UnshapedArray', _Placeholder)
_set(jax.core, 'Tracer', _Placeholder)
_set(jax, 'abstract_arrays',
     types.SimpleNamespace(raise_to_shaped=lambda aval: aval))
import jax.interpreters  # noqa: E402
for _sub in ('xla', 'ad', 'batching'):
  if not hasattr(jax.interpreters, _sub):
    setattr(jax.interpreters, _sub, types.SimpleNamespace())
_set(jax.interpreters.xla, 'translations', {})
_set(jax.interpreters.xla, 'lower_fun', lambda fn, multiple_results: None)
_set(jax.interpreters.ad, 'deflinear', lambda prim, rule: None)
_set(jax.interpreters.batching, 'primitive_batchers', {})
