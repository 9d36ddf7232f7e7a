"""Rule: ``functools.partial`` of a user initializer with more parameters.

Legacy ``flax.nn`` layers called every initializer ``init(key, shape)``;
linen layers call ``init(key, shape, param_dtype)``.  An initializer
written ``def constant_initializer(unused_key, shape, fill_value)`` and
handed to a layer as ``functools.partial(constant_initializer,
fill_value=v)`` ran under legacy Flax; under linen the dtype lands on
``fill_value`` as well (``TypeError: got multiple values for argument``).
Changing the definition would change its other callers, so the partial
is wrapped (a ``LegacyInitializer`` plan; the linen emitter writes
``upgraded_layers.legacy_initializer(functools.partial(...))``), which
calls it as legacy did, ``(key, shape)`` (rules/early_linen/
initializers.py does the same for partials that bind ``dtype=``; a def
of exactly ``(key, shape)`` gets ``dtype=None`` there instead).

Certainty: the partial's function is a def of the codebase (flow.py finds
it across files) whose first parameter is named like a PRNG key
(``rng``, ``key``, ``unused_key`` ...), whose second is ``shape``, and
whose every later parameter without a default the partial binds by
keyword (so no caller could pass a third positional argument: it would
have collided under legacy Flax too).  Where the partial goes (a layer's
``*_init=``, a module field it reaches later) does not matter: the wrapper
takes ``(key, shape)`` and an optional dtype, and ignores the dtype.
"""

import re

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import plans

_KEY = re.compile(r'(^|_)(rng|key|prng|rngs|prng_key|rng_key|seed)($|_)')


def _partial_func(call, imports):
  """The function argument of ``functools.partial(f, ...)`` (also spelled
  ``partial(f, ...)`` after ``from functools import partial``), or None."""
  name = cst_util.dotted(call.func) or ''
  full = imports.get(name.split('.')[0], '')
  if name == 'functools.partial' or (
      name == 'partial' and full == 'functools.partial'):
    if call.args and call.args[0].keyword is None and not call.args[0].star:
      return call.args[0].value
  return None


def _initializer_def(up, expr):
  """The FunctionDef ``expr`` names when it is one def of the codebase."""
  vals = up.flow_values(expr) if hasattr(up, 'flow_values') else None
  if not vals or len(vals) != 1:
    return None
  v = next(iter(vals))
  if v[0] != 'func':
    return None
  d = up.ctx.codebase.flow.defs.get((v[1], v[2]))
  return d.node if d is not None and not (d.is_method or d.is_lambda) else (
      None)


def _needs_wrap(fn, call):
  ps = fn.params
  plain = list(ps.posonly_params) + list(ps.params)
  if (len(plain) < 3 or not _KEY.search(plain[0].name.value)
      or plain[1].name.value != 'shape'
      or isinstance(ps.star_arg, cst.Param) or ps.star_kwarg is not None):
    return False
  rest = call.args[1:]
  if any(a.keyword is None or a.star for a in rest):
    return False  # positional or splatted arguments: not decided here
  bound = {a.keyword.value for a in rest}
  return all(p.name.value in bound or p.default is not None
             for p in plain[2:]) and any(
                 p.name.value in bound for p in plain[2:])


def leave_call(up, original_node, updated_node):
  """``functools.partial(init, k=v)`` -> wrapped (see the module
  docstring), else None."""
  f = _partial_func(original_node, up.ctx.facts.imports)
  if f is None or not up.ctx.facts.nn_prefixes:
    return None
  fn = _initializer_def(up, f)
  if fn is None or not _needs_wrap(fn, original_node):
    return None
  up.rewrote(original_node, 'initializer_partial',
             f'functools.partial({up.ctx.code_of(f)}, ...): an initializer '
             'of more than (key, shape) -> upgraded_layers.legacy_initializer '
             '(linen passes a dtype as its third argument)')
  return up.emit.legacy_initializer(plans.LegacyInitializer(
      partial=updated_node))
