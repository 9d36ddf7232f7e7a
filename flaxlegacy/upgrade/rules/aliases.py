"""Module aliases and modules held by hyper-parameters.

Two legacy idioms name a module without defining a class (the PixelCNN++
example uses both):

* **Module-level partial aliases.** ``ConvTranspose = Conv.partial(
  transpose=True)`` at the top level of a file (also an alias of an alias,
  ``Halve = ConvDown_.partial(strides=(2, 2))``).  A call of the alias is a
  call of the class with those arguments bound; its legacy auto-name is the
  class's (``Module.partial`` keeps ``__name__``).  The rewrite calls the
  ``functools.partial`` the alias becomes (``ConvTranspose(features=...)
  (x)``), and ``X.partial`` of an alias becomes ``functools.partial(X,
  ...)``.
* **A module passed as a hyper-parameter.** ``GatedResnet.partial(
  conv_module=ConvDown)`` ... ``conv_module(x, c)`` in ``GatedResnet``.
  Where every binding of that parameter the codebase shows (``.partial``
  keywords and call keywords, through aliases) is a legacy module class,
  and all of them split their parameters the same way, the call is rewritten
  as a call of such a module (``self.conv_module(features=c)(x)``), named
  at run time from ``self.conv_module.__name__`` as legacy names it.
  Otherwise the call keeps its code and gets a TODO.

The facts these read (``partial_aliases``, ``bound_values``, and the
queries over them) are collected by collectors/aliases.py.
"""

from flaxlegacy.upgrade.collectors import aliases as alias_facts
from flaxlegacy.upgrade.rules import _shared


def resolve_alias(resolver, name):
  """A Ref('partial', ...) for a module-level alias, or None."""
  ctx = resolver.up.ctx
  call, _ = alias_facts.alias_call(ctx.codebase, ctx.facts, name)
  if call is None:
    return None
  inner = resolver(call.func.value)
  if inner is None or inner.kind not in ('layer', 'class', 'partial'):
    return None
  return _shared.Ref('partial', inner, call)


def resolve_field_module(resolver, name):
  """Ref('class', info, 'field') for a parameter that holds a module.

  Returns (ref or None, why-not or None): why-not is set when the field is
  bound to modules but the call cannot be rewritten with certainty.
  """
  up = resolver.up
  info = getattr(up, 'info', None)
  if info is None or name not in getattr(up, 'fields', ()):
    return None, None
  ctx = up.ctx
  values = alias_facts.field_values(ctx.codebase, info, name)
  infos = [alias_facts.root_info(ctx.codebase, ctx.facts, v) for v in values]
  if not values or all(i is None for i in infos):
    return None, None
  if None in infos or any(ctx.codebase.module(ctx.facts, v) is None
                          for v in values):
    return None, (f'{name!r} holds a module here, but not always a plain '
                  f'legacy module class ({sorted(map(str, values))}): '
                  'rewrite its calls by hand')
  first = infos[0]
  for i in infos[1:]:
    if (i.params, i.fields, i.call, i.var_kw) != (
        first.params, first.fields, first.call, first.var_kw):
      return None, (f'{name!r} holds modules with different parameters '
                    f'({sorted(values)}): rewrite its calls by hand')
  return _shared.Ref('class', first, 'field'), None
