"""Rule: modules that drive other modules (a module class as a parameter).

A legacy module can take a module class as a hyper-parameter and run that
class's legacy life cycle itself -- a masking wrapper::

    class Masked(nn.Module):
      def apply(self, *args, wrapped_module, mask=None, **kwargs):
        def init_fn(rng, _):
          _, params = wrapped_module.init(rng, *args, **kwargs)
          return params
        params = self.param('unmasked', None, init_fn)
        ...
        return wrapped_module.call(masked_params, *args, **kwargs)

Linen expresses all of it: the class is a field (``wrapped_module``), the
legacy ``**kwargs`` the catch-all dict field, ``*args`` the ``__call__``
inputs, and ``init`` / ``apply`` run inside a module.  Which keyword goes
to the wrapped class's constructor and which to its ``__call__`` depends on
the class, known only at run time; so ``P.init(rng, *a, **kw)`` and
``P.call(params, *a, **kw)`` on such a parameter ``P`` become
``_LegacyModule(self.P, kw).init(rng, *a)`` / ``.call(params, *a)``: a small
class written into the upgraded file (plain linen, nothing imported from
flaxlegacy) that splits the keywords by the linen class's dataclass fields
(flax's own layers: legacy ``bias`` / ``scale`` renamed to ``use_bias`` /
``use_scale``, and the arguments linen needs for legacy numbers added, as
layer_table.py does for direct calls), builds an unbound instance, and
returns what legacy returned (``init``: ``(outputs, params)``; ``call``:
the outputs).  A keyword that is neither a field nor a ``__call__``
parameter of the class raises at run time.

A legacy layer passed as such a class (``wrapped_module=nn.Dense``, also
through a helper returning ``Masked.partial(wrapped_module=module)``) is the
linen layer of the same name: its call sites keep the linen spelling
without a TODO.  A life-cycle call of another shape (``init_by_shape``,
``create``, a positional keyword split) keeps a TODO.
"""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import layer_table

HELPER = '_LegacyModule'


def _helper_src():
  renames = {}
  added = {}
  for layer in layer_table.LAYERS.values():
    if layer.linen in layer_table.SHIPPED:
      continue
    renames.update({k: v for k, v in layer.renames.items()
                    if k in layer.params})
    if layer.add_kwargs:
      added[layer.linen] = {k: v for k, v in layer.add_kwargs.items()}
  added_src = '{' + ', '.join(
      f'{name!r}: {{' + ', '.join(f'{k!r}: {v}' for k, v in kw.items()) + '}'
      for name, kw in sorted(added.items())) + '}'
  return f'''\
class _LegacyModule:
  """A linen module class run the way legacy modules drove one another.

  ``kwargs`` (the keyword arguments a legacy module class took) are split
  between the class's fields and its ``__call__`` keywords; flax's own
  layers get their linen keyword names (RENAMES) and the arguments linen
  needs for the legacy numbers (ADDED).  ``init(rng, *inputs)`` returns ``(outputs, params)`` and
  ``call(params, *inputs)`` the outputs, as legacy ``Module.init`` /
  ``Module.call`` did.
  """

  RENAMES = {renames!r}
  ADDED = {added_src}

  def __init__(self, module_class, kwargs):
    import dataclasses  # pylint: disable=g-import-not-at-top
    import functools  # pylint: disable=g-import-not-at-top
    cls = module_class
    while isinstance(cls, functools.partial):
      cls = cls.func
    fields = {{f.name for f in dataclasses.fields(cls) if f.init}}
    fields.discard('parent')
    flax_layer = cls.__module__.startswith('flax.linen')
    ctor, self.call_kwargs = {{}}, {{}}
    for k, v in kwargs.items():
      if flax_layer and k not in fields and self.RENAMES.get(k) in fields:
        k = self.RENAMES[k]
      (ctor if k in fields else self.call_kwargs)[k] = v
    if flax_layer:
      for k, v in self.ADDED.get(cls.__name__, {{}}).items():
        ctor.setdefault(k, v)
    self.module = module_class(**ctor, parent=None)

  def init(self, rng, *inputs):
    outputs, variables = self.module.init_with_output(
        rng, *inputs, **self.call_kwargs)
    return outputs, variables.get('params', {{}})

  def call(self, params, *inputs):
    return self.module.apply({{'params': params}}, *inputs,
                             **self.call_kwargs)
'''


def life_cycle_call(up, original, updated):
  """``P.init(rng, *a, **kw)`` / ``P.call(params, *a, **kw)`` with ``P`` a
  driven parameter of the module being rewritten: the rewritten call, or
  None if it is not one; ``updated`` itself after a TODO."""
  f = original.func
  info = getattr(up, 'info', None)
  if not (isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name)
          and info is not None and f.value.value in getattr(info, 'driven', ())
          and f.value.value not in getattr(up, 'assigned_fields', ())):
    return None
  method = f.attr.value
  args = list(updated.args)
  if method not in ('init', 'call') or not args or args[0].keyword or (
      args[0].star):
    up.todo(original, f'{f.value.value}.{method}: the legacy life cycle of a '
            'module class held by a parameter, in a form not rewritten '
            'here; port it to Module.init / Module.apply by hand')
    return updated
  code = up.ctx.code_of
  pos = [a for a in args if a.keyword is None and a.star != '**']
  items = []
  for a in args:
    if a.star == '**':
      items.append(f'**{code(a.value)}')
    elif a.keyword is not None:
      items.append(f'{a.keyword.value!r}: {code(a.value)}')
  kwargs = '{' + ', '.join(items) + '}'
  if len(items) == 1 and items[0].startswith('**'):
    kwargs = items[0][2:]
  cls = code(updated.func.value)
  rest = ', '.join(
      (a.star if isinstance(a.star, str) else '') + code(a.value) for a in pos)
  up.ctx.needed_defs[HELPER] = _helper_src()
  up.rewrote(original, 'drivers', f'{f.value.value}.{method} of a module class '
             f'field -> {HELPER}(...).{method}')
  return cst.parse_expression(f'{HELPER}({cls}, {kwargs}).{method}({rest})')


def layer_values(up, call, info, bound_params=None):
  """Marks legacy layers (``nn.Dense``) passed to ``info``'s driven
  parameters in ``call`` as handled: the linen layer of the same name is
  what the rewritten wrapper drives.  ``bound_params``: for a helper call,
  {argument index or keyword: the parameter of ``info`` it binds}."""
  driven = getattr(info, 'driven', ())
  if not driven:
    return
  for i, a in enumerate(call.args):
    if a.star:
      continue
    key = a.keyword.value if a.keyword is not None else i
    param = (bound_params or {}).get(key) if bound_params is not None else (
        key if isinstance(key, str) else None)
    if param not in driven:
      continue
    attr = cst_util.legacy_attr(a.value, up.ctx.facts.nn_prefixes)
    layer = layer_table.LAYERS.get(attr)
    if layer is not None and layer.linen not in layer_table.SHIPPED:
      up._handled.add(id(a.value))  # pylint: disable=protected-access
