"""Rule: legacy attention calls -> linen ``MultiHeadDotProductAttention``.

``nn.SelfAttention(x, num_heads=8, causal_mask=True, padding_mask=pm,
bias=False, cache=cache)`` becomes::

    nn.MultiHeadDotProductAttention(num_heads=8, use_bias=False,
        decode=cache is not None, name=...)(
        x, mask=legacy_attention_mask(x, causal_mask=True, padding_mask=pm,
                                      decode=cache is not None))

* Parameters: linen's module has the same children ``query`` / ``key`` /
  ``value`` (``DenseGeneral`` kernels ``(in, heads, head_dim)``, biases
  ``(heads, head_dim)``) and ``out`` (kernel ``(heads, head_dim, out)``), so
  the legacy tree is kept.  Legacy ``SelfAttention`` is a partial of
  ``MultiHeadDotProductAttention``, so both take the legacy auto-name
  ``MultiHeadDotProductAttention_<n>``: the name planner of rules/name_plan.py
  writes ``name=`` where linen's own counter differs.
* Numbers: the hyper-parameters map one to one (``bias`` -> ``use_bias``;
  legacy ``deterministic`` defaults to False, written out when the call has a
  dropout rate).  The masks have no linen argument: they are built by
  ``flaxlegacy.migrate.upgraded_attention.legacy_attention_mask`` (plain
  jax.numpy, importable with ``FLAXLEGACY=off``) with the legacy rules, which
  also refuses attention over other axes than linen's.
* Decoding: legacy ``cache=`` (an ``nn.attention.Cache``) -> linen
  ``decode=<cache> is not None``; the cache is linen's ``'cache'``
  collection.  The program-level life cycle (``Cache().mutate()`` at init,
  ``initialize_cache``, ``cache.mutate()`` around a step) is
  rules/attention_cache.py's; where the codebase builds no legacy Cache the
  call keeps a TODO.
* ``**kwargs`` (one dict, a plain variable: vision transformers splat
  their attention config): split when the call runs by
  ``_legacy_attention_kwargs``, written into the file (linen names for the
  constructor, the mask's arguments apart, a TypeError for the rest).
* ``attention_fn=``: legacy's own ``dot_product_attention`` is dropped
  (the target's default); any other function is handed to linen through
  ``legacy_attention_fn`` (upgraded_attention.py), which calls it with
  legacy's keywords (``axis=``, the mask as legacy's ``-1e10`` bias).
* Left with a TODO: ``*args`` / several ``**kwargs``,
  positional arguments legacy would reject, and inputs that are not plain
  variables (the mask needs them a second time).

The rule binds the call's arguments to the legacy parameters and decides
an ``Attention`` plan (upgrade/plans.py); the linen spellings above (the
constructor's keywords, the mask helper, ``decode=``, the splat helper)
are the emitter's.
"""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade.collectors.usage import ATTENTION  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.emit.linen import ATTENTION_CTOR  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.emit.linen import ATTENTION_MASK_HELPER  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.emit.linen import ATTENTION_PARTIAL_HELPER  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.rules import _shared
from flaxlegacy.upgrade.rules import attention_cache

# The legacy auto-name of both (SelfAttention is a partial class).
TYPE_NAME = 'MultiHeadDotProductAttention'

# legacy MultiHeadDotProductAttention.apply parameters after inputs_q
PARAMS = ('inputs_kv', 'num_heads', 'dtype', 'qkv_features', 'out_features',
          'attention_axis', 'causal_mask', 'padding_mask', 'key_padding_mask',
          'segmentation', 'key_segmentation', 'cache', 'broadcast_dropout',
          'dropout_rng', 'dropout_rate', 'deterministic', 'precision',
          'kernel_init', 'bias_init', 'bias', 'attention_fn')
DECODE_TODO = ('legacy attention cache -> linen decode=(cache is not None): '
               "the decoding cache is linen's 'cache' collection (init with "
               "a cache argument, apply with mutable=['cache']); port the "
               'Cache().initialize_cache / cache.mutate() program code by '
               'hand')


def legacy_name(attr):
  """'SelfAttention' / 'MultiHeadDotProductAttention' for a legacy attr."""
  return ATTENTION.get(attr)


def _simple(expr):
  """A plain variable or attribute chain (safe to evaluate twice)."""
  if isinstance(expr, cst.Name):
    return True
  if isinstance(expr, cst.Attribute):
    return _simple(expr.value)
  return False


def _is_none(expr):
  return isinstance(expr, cst.Name) and expr.value == 'None'


PARTIAL_TODO = ('{name}.{what}(...): {name!r} holds legacy {attr} (its '
                "default); linen's attention takes another attention_fn "
                'interface and has no .{what}: port this by hand')
# where a module class's fields hold a legacy attention class (flow.py)
_LEGACY_ATTENTION_HOMES = ('flax.nn.', 'flax.nn.attention.',
                           'flax.deprecated.nn.',
                           'flax.deprecated.nn.attention.')


def field_attention(resolver, expr):
  """(Ref or None, why or None) for a call of a hyper-parameter whose
  default is a legacy attention class (``self_attention_module=
  nn.SelfAttention``).

  The call is rewritten as that class's call behind a run-time check that
  the field holds its default (``legacy_attention_default``): the values
  a gin binding or a caller outside the codebase may give are not known
  here.  Where the codebase gives it a value of its own (another class or
  layer), or the body rebinds it otherwise than ``name = name.partial(...)``
  (that ``.partial`` keeps a TODO), the call keeps a TODO.
  """
  up = resolver.up
  info = getattr(up, 'info', None)
  name = expr.value
  if info is None or name not in getattr(up, 'fields', ()) or not hasattr(
      up, 'fn'):
    return None, None
  default = info.defaults.get(name)
  if not default:
    return None, None
  try:
    node = cst_util.expr(default)
  except cst.ParserSyntaxError:
    return None, None
  legacy = cst_util.legacy_attr(node, up.ctx.facts.nn_prefixes)
  attr = legacy_name(legacy) if legacy else None
  if attr is None:
    return None, None
  why = (f'{name!r} defaults to legacy {attr}, but ' + '{}; rewrite its '
         'calls by hand')
  for value in _assigned_values(up.fn, name):
    if not (isinstance(value, cst.Call)
            and isinstance(value.func, cst.Attribute)
            and value.func.attr.value == 'partial'
            and isinstance(value.func.value, cst.Name)
            and value.func.value.value == name):
      return None, why.format('the body binds it to another value')
  values = up.flow_values(expr) or ()
  for v in values:
    if v[0] == 'ext' and any(
        v[1] == home + attr.split('.')[-1] for home in _LEGACY_ATTENTION_HOMES):
      continue
    if v[0] in ('class', 'layer', 'ext'):
      return None, why.format('the codebase gives it another module '
                              f'({v[-1] if len(v) > 1 else v[0]})')
  return _shared.Ref('attention', attr, name), None


def field_partial(up, original, updated, ref):
  """``field.partial(k=v, ...)`` of a hyper-parameter that defaults to
  legacy's attention class (``ref`` from ``field_attention``): the
  keywords are kept for the call, which ``field_attention`` rewrites behind
  its run-time check; None where a keyword has no linen counterpart (or is
  positional or splatted), for the caller's TODO."""
  if ref.extra is None:
    return None
  for a in updated.args:
    k = cst_util.kw(a)
    if a.star or k is None or (k != 'attention_fn'
                               and k not in ATTENTION_CTOR):
      return None
  up.rewrote(original, 'attention', f'{ref.extra}.partial(...) of legacy '
             f'{ref.target} -> its keywords, kept for the checked call')
  up.ctx.report.rewritten[-1]['shipped'] = (
      ATTENTION_PARTIAL_HELPER)
  return up.emit.attention_partial(plans.AttentionPartial(
      call=updated, receiver=updated.func.value))


def _assigned_values(fn, name):
  """The values ``name = value`` statements of ``fn``'s body bind."""
  out = []

  class V(cst.CSTVisitor):

    def visit_Assign(self, node):
      for t in node.targets:
        if isinstance(t.target, cst.Name) and t.target.value == name:
          out.append(node.value)
        elif not isinstance(t.target, (cst.Attribute, cst.Subscript)):
          if any(isinstance(n, cst.Name) and n.value == name
                 for n in _names(t.target)):
            out.append(None)

    def visit_FunctionDef(self, node):
      return node is fn

  fn.visit(V())
  return out


def _names(target):
  if isinstance(target, cst.Name):
    return [target]
  if isinstance(target, (cst.Tuple, cst.List)):
    return [n for e in target.elements for n in _names(e.value)]
  if isinstance(target, cst.StarredElement):
    return _names(target.value)
  return []


# legacy's own attention function, the default of its attention calls
_DOT_PRODUCT = ('dot_product_attention', 'attention.dot_product_attention')


def _legacy_dot_product(up, expr):
  """Whether ``expr`` is legacy's ``dot_product_attention``."""
  if cst_util.legacy_attr(expr, up.ctx.facts.nn_prefixes) in _DOT_PRODUCT:
    return True
  values = (up.flow_values(expr) or ()) if isinstance(expr, cst.Name) else ()
  return bool(values) and all(
      v[0] == 'ext' and any(v[1] == home + 'dot_product_attention'
                            for home in _LEGACY_ATTENTION_HOMES)
      for v in values)


def visit_call(up, node, ref):
  """Before the arguments are rewritten: legacy's own
  ``dot_product_attention`` given as a legacy attention call's
  ``attention_fn=`` is dropped by ``rewrite`` (the target's default), so
  the reference itself needs no rewrite (nor its TODO)."""
  if ref is None or ref.kind != 'attention':
    return
  for a in node.args:
    if (a.keyword is not None and a.keyword.value == 'attention_fn'
        and _legacy_dot_product(up, a.value)):
      v = a.value
      while isinstance(v, cst.Attribute):
        up._handled.add(id(v))  # pylint: disable=protected-access
        v = v.value


def rewrite(up, original, updated, attr, guard=None):
  """The linen construction + call for one legacy attention call.

  ``up``: the ApplyRewriter of the enclosing body (rules/apply_rewriter.py).
  ``guard``: the field the call goes through (``field_attention``), whose
  value is checked at run time to be its default.
  Returns ``updated`` (with a TODO recorded) where it cannot be certain.
  """
  kind = legacy_name(attr)
  args = list(updated.args)
  sig = ('inputs_q',) + (PARAMS if kind == 'MultiHeadDotProductAttention'
                         else ())
  bound = {}
  keys = []  # the legacy parameter of each argument
  name_arg = None
  splat = None  # **kwargs: mapped when the call runs (_legacy_attention)
  for i, a in enumerate(args):
    if a.star == '**' and splat is None and _simple(a.value):
      splat = a.value
      keys.append('**')
      continue
    if a.star:
      up.todo(original, f'nn.{attr} with *args / several **kwargs: the '
              'legacy attention arguments cannot be mapped')
      return updated
    k = a.keyword.value if a.keyword is not None else None
    if k is None:
      if i >= len(sig):
        up.todo(original, f'nn.{attr}: more positional arguments than '
                'legacy accepts (SelfAttention takes keywords after the '
                'input)')
        return updated
      k = sig[i]
    keys.append(k)
    if k == 'name':
      name_arg = a
      continue
    if k != 'inputs_q' and k not in PARAMS:
      up.todo(original, f'nn.{attr}: unknown argument {k!r}')
      return updated
    bound[k] = a.value
  if 'inputs_q' not in bound or ('num_heads' not in bound and splat is None):
    up.todo(original, f'nn.{attr} without inputs or num_heads')
    return updated
  attention_fn = bound.get('attention_fn')
  if attention_fn is not None and _legacy_dot_product(up, attention_fn):
    attention_fn = None  # legacy's default: the target's own
  q = bound['inputs_q']
  kv = bound.get('inputs_kv')
  if kv is not None and _is_none(kv):
    kv = None
  if not _simple(q) or (kv is not None and not _simple(kv)):
    up.todo(original, f'nn.{attr}: the inputs must be plain variables (the '
            'legacy mask is built from them): assign them to a variable '
            'first')
    return updated
  cache = bound.get('cache')
  if cache is not None and _is_none(cache):
    cache = None
  auto = None
  if name_arg is None:
    if up.todo_all:
      up.todo(original, up.todo_all)
    auto = up._auto_name_plan(original, TYPE_NAME, None)  # pylint: disable=protected-access
  if cache is not None and not attention_cache.enabled(up.ctx.codebase):
    # where the codebase builds the cache, rules/attention_cache.py ports
    # its life cycle (or leaves the TODO at the program's lines)
    up.todo(original, DECODE_TODO)
  up.rewrote(original, 'attention', f'nn.{attr} -> linen '
             'MultiHeadDotProductAttention with the legacy mask')
  up.ctx.report.rewritten[-1]['shipped'] = ATTENTION_MASK_HELPER
  return up.emit.attention(plans.Attention(
      call=updated, inputs_q=q, inputs_kv=kv,
      args=tuple(zip(keys, args)), given=tuple(bound), splat=splat,
      cache=cache, dropout_rng=bound.get('dropout_rng'), name=name_arg,
      auto_name=auto, attention_fn=attention_fn,
      guard=None if guard is None else (guard, updated.func)))
