"""Rule: the legacy attention cache life cycle -> linen's ``'cache'``
collection.

Every 2020 autoregressive decoder (flax's lm1b / wmt examples, and the
codebases built from them) drove ``flax.nn.attention.Cache`` the same way::

    with nn.attention.Cache().mutate() as cache_def:           # 1. init
      _, model = model_def.create_by_shape(rng, specs, cache=cache_def)
    cache = cache_def.initialize_cache((batch, length))         # 2. zeros
    with cache.mutate() as new_cache:                           # 3. a step
      logits = model(token, cache=new_cache)
    ... new_cache ...                                           # the next

and modules passed ``cache`` on to attention layers (``cache=cache``) or
kept their own entry (``cache.store(...)`` / ``cache.retrieve(...)``: the
positional-embedding modules of lm1b / wmt).  Upgraded, the cache is the
dict of linen's ``'cache'`` collection (``{'cache': {...}}``):

1. the init in a ``Cache().mutate()`` block: ``_variables = M(...,
   cache=True).init(...)``, the params and ``cache_def = {k: v for k, v in
   _variables.items() if k == 'cache'}`` (the block goes; the module's
   ``cache`` argument, a linen field or call argument, is ``True``: the
   module decodes, which linen's attention calls ``decode``);
2. ``E.initialize_cache(shape[, dtype])`` ->
   ``legacy_initialize_cache(E, shape[, dtype])`` (upgraded_cache.py:
   zeros of ``shape + tail`` for every array, as legacy);
3. a model call in a ``E.mutate()`` block that passes the block's target:
   ``out, new_cache = M(..., cache=True).apply({'params': p, **E}, ...,
   mutable=['cache'])``;
4. in modules, ``cache.store(v)`` / ``cache.retrieve(d)`` on a parameter
   (a linen field) -> ``legacy_cache_store(self, v)`` /
   ``legacy_cache_retrieve(self, d)``: the module's own variable of the
   ``'cache'`` collection (a ``LegacyCacheEntry`` with the legacy fields).

Steps 1 and 3 share programs.py's ``nn.stateful`` machinery (a block whose
target the model call threads); this module decides what is a cache.

Certainty: the codebase must build a legacy ``Cache`` (``attention.Cache(``
or ``Cache`` imported from ``flax.nn.attention``) and build no
``nn.Collection`` of its own, so that a ``.mutate()`` block, an
``.initialize_cache`` call, or a module parameter with ``store`` /
``retrieve`` can only be the cache.  Otherwise they keep their TODOs.  A
cache block whose body has no model call the upgrade rewrites keeps a TODO
(programs.py).
"""

import libcst as cst

from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade.flow_facts import shared as flow_shared
from flaxlegacy.upgrade.emit.linen import CACHE_ENTRY_HELPERS  # pylint: disable=g-importing-member

COLLECTION = 'cache'


def enabled(codebase):
  """Whether the codebase builds a legacy attention Cache and no
  nn.Collection of its own (the fact: analyses/attention_cache.py)."""
  return bool(getattr(codebase, 'attention_cache', False))


def mutated(item):
  """``X`` of a ``with`` item ``X.mutate() as N`` (a name bound), else
  None."""
  call = item.item
  if (flow_shared.mutate_call(call) and item.asname is not None
      and isinstance(item.asname.name, cst.Name)):
    return call.func.value
  return None


def mutate_block(rw, item):
  """What a ``with`` item ``X.mutate() as N`` is, for programs.py:
  ('init', None) for ``nn.attention.Cache().mutate()``, ('step', X) for
  ``X.mutate()`` on another expression, in a codebase of caches; else
  None.
  """
  inner = mutated(item)
  if inner is None or not enabled(rw.codebase):
    return None
  if isinstance(inner, cst.Call) and (
      rw.is_nn(inner.func, 'attention.Cache')
      or _imported_cache(rw, inner.func)):
    if inner.args:
      return None  # Cache(batch_axes): not the lm1b shape; a TODO stays
    return ('init', None)
  if isinstance(inner, (cst.Name, cst.Attribute)):
    if rw._collection_mutate(item):  # pylint: disable=protected-access
      return None  # an nn.Collection's mutable copy (program/stateful.py)
    return ('step', inner)
  return None


def _imported_cache(rw, func):
  """``Cache`` imported from flax.nn.attention (``from flax.nn.attention
  import Cache``)."""
  return (isinstance(func, cst.Name)
          and rw.f.imports.get(func.value, '').endswith('nn.attention.Cache'))


def initialize_cache(rw, original, updated):
  """``E.initialize_cache(shape[, dtype])`` -> the helper, or None."""
  f = original.func
  if not (enabled(rw.codebase) and isinstance(f, cst.Attribute)
          and f.attr.value == 'initialize_cache'):
    return None
  args = list(updated.args)
  if (not 1 <= len(args) <= 2 or any(a.star for a in args)
      or any(a.keyword is not None and a.keyword.value not in (
          'shape', 'dtype') for a in args)):
    rw.todo(original, 'initialize_cache: the arguments are not legacy\'s '
            '(shape[, dtype]); port by hand to legacy_initialize_cache')
    return updated
  if isinstance(f.value, cst.Call):
    return None  # Cache().initialize_cache: nothing was stored, a TODO stays
  rw.note(original, 'cache_def.initialize_cache -> legacy_initialize_cache')
  return rw.emit.initialize_cache(plans.InitializeCache(
      updated.func.value, tuple(args), updated))


def module_call_shape(up, call):
  """``cache.store(v)`` / ``cache.retrieve([d])`` in a module body, on a
  parameter (a linen field), in a codebase of caches: what ``module_call``
  rewrites (elsewhere the nn.Collection TODO of rules/modules.py stays)."""
  f = call.func
  if not (enabled(up.ctx.codebase) and isinstance(f, cst.Attribute)
          and f.attr.value in ('store', 'retrieve')
          and isinstance(f.value, cst.Name) and f.value.value in up.fields):
    return False
  args = list(call.args)
  if any(a.star or a.keyword is not None for a in args):
    return False
  return len(args) == 1 if f.attr.value == 'store' else len(args) <= 1


def module_call(up, original, updated):
  """The CacheEntry plan of a ``module_call_shape`` call (written by the
  emitter: ``legacy_cache_store(self, v)`` ...)."""
  op = original.func.attr.value
  helper = CACHE_ENTRY_HELPERS[op]  # the report names the emitter's helper
  up.rewrote(original, 'attention_cache', f'cache.{op} -> the '
             "module's variable of linen's 'cache' collection")
  up.ctx.report.rewritten[-1]['shipped'] = helper
  return up.emit.cache_entry(plans.CacheEntry(op=op,
                                              args=tuple(updated.args)))
