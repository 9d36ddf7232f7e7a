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

The rewrite is a plan (upgrade/plans.py ``DrivenLifecycle``) that the
rewriter's emitter writes (``up.emit``; the linen one writes the
``_LegacyModule`` class too).
"""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import layer_table
from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade.emit.linen import DRIVER_HELPER  # pylint: disable=g-importing-member


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
  pos = [a for a in args if a.keyword is None and a.star != '**']
  keywords = [a for a in args if a.star == '**' or a.keyword is not None]
  up.rewrote(original, 'drivers', f'{f.value.value}.{method} of a module class '
             f'field -> {DRIVER_HELPER}(...).{method}')
  return up.emit.driven_lifecycle(plans.DrivenLifecycle(
      op=method, module=updated.func.value, inputs=tuple(pos),
      keywords=tuple(keywords)))


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
