"""Rule: a submodule call of a hyper-parameter that holds module classes of
different parameters (known only at run time which one).

A legacy module can take its submodule's class as a hyper-parameter with a
default, and the codebase can pass another class of other parameters::

    class Transformer(nn.Module):
      def apply(self, x, pos_module=AddLearnedPositions, max_len=512):
        ...
        x = pos_module(x, max_len=max_len)

    model = Transformer.partial(pos_module=AddSinusoidalPositions)

Legacy took every keyword at the call.  Linen splits them between the
constructor (fields) and ``__call__``, and the split is the class's: the
default's (``max_len`` a field) is not the other's (``max_len`` a
``__call__`` argument).  Where the codebase's values of the parameter
(flow.py, through ``.partial`` keywords, ``**kwargs`` dicts, test cases)
are module classes the upgrade converts, of different parameters, the call
becomes ``_legacy_module_call(self.pos_module, x, max_len=..., name=...)``
(a ``RuntimeSubmoduleCall`` plan the emitter writes):
a small function written into the upgraded file (plain linen) that splits
the keywords by the dataclass fields of the class the field holds at run
time, constructs the submodule inside the calling module (so it is bound as
a child, with the legacy name) and calls it on the inputs.  Only for a
call of one input and keywords (a positional hyper-parameter, ``*args`` or
``**kwargs``: the split of those depends on each class's signature: a
TODO), and only where no value is a legacy layer (linen's layers rename
some legacy keywords: a TODO).
"""

from flaxlegacy.upgrade import flow as flow_lib
from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade.rules import _shared

def _signature(info):
  return (tuple(info.params), tuple(info.fields), tuple(info.call),
          info.var_kw)


def check(codebase, values, ref):
  """``ref`` (what the source alone says the parameter holds: a
  Ref('class', info, 'field'), or None) checked against ``values`` (what
  it holds, flow.py): (ref, why).  A Ref of extra 'runtime' when the
  values are converted module classes of different parameters; ``ref``
  when they split alike (or nothing more is known); (None, why) when some
  value cannot be split this way."""
  if values is None:
    return ref, None
  usable = flow_lib.usable(values, None, getattr(codebase, 'flow', None))
  classes = [v for v in usable if v[0] == 'class']
  if len({(v[1], v[2]) for v in classes}) < 2:
    return ref, None
  if any(v[0] == 'layer' for v in usable):
    return None, ('it holds legacy layers and module classes, whose '
                  'keywords linen splits differently: rewrite its calls by '
                  'hand')
  infos = []
  for v in classes:
    f = codebase.files.get(v[1])
    info = f.modules.get(v[2]) if f is not None else None
    if info is None or info.problems:
      return None, (f'it holds {v[2]}, not a module class the upgrade '
                    'converts: rewrite its calls by hand')
    infos.append(info)
  if len({_signature(i) for i in infos}) == 1:
    return ref, None
  return _shared.Ref('class', infos[0], 'runtime'), None


def call(up, original, updated, ref, auto_name):
  """The rewritten call (a RuntimeSubmoduleCall plan, written by the
  emitter: ``_legacy_module_call(...)``), or ``updated`` after a TODO;
  ``auto_name()``: the AutoName plan of the call, or None."""
  args = list(updated.args)
  positional = [a for a in args if a.keyword is None]
  if any(a.star for a in args) or len(positional) != 1 or (
      args.index(positional[0]) != 0):
    vals = up.flow_values(original.func) or ()
    classes = sorted({v[2] for v in vals if v[0] == 'class'})
    up.todo(original, f'{up.ctx.code_of(original.func)!r} holds modules '
            f'with different parameters ({classes}): positional '
            'hyper-parameters, *args or **kwargs only each class\'s '
            'signature can split (the upgrade splits keywords at run '
            'time): rewrite its calls by hand')
    return updated
  kwargs = [a for a in args if a.keyword is not None]
  name = None
  if not any(a.keyword.value == 'name' for a in kwargs):
    name = auto_name()
    if name is None:
      up.todo(original, 'cannot tell the legacy auto-name')
      return updated
  up.rewrote(original, 'runtime_modules', 'call of a parameter holding '
             'module classes of different fields -> split at run time')
  return up.emit.runtime_submodule_call(plans.RuntimeSubmoduleCall(
      module=updated.func, input=positional[0], keywords=tuple(kwargs),
      name=name))


def unknown_positions(up, original, ref):
  """Why a call of a hyper-parameter (``ref``: Ref('class', default,
  'field'), the class whose signature the call is rewritten by) keeps a
  TODO: the codebase gives it a value the facts do not follow and the call
  passes hyper-parameters by position, which the default names (another
  class may name the same positions otherwise: ``Wide(x, width, depth)``
  by default, ``Deep(x, depth, width)`` from a caller would get the
  default's names, silently); None where nothing rules the rewrite out.
  By keyword, another class's split differs from the default's only where
  the rewritten call fails (a field given to ``__call__`` or the reverse:
  a TypeError), so those calls keep the default's split."""
  if ref is None or ref.kind != 'class' or ref.extra != 'field':
    return None
  values = up.flow_values(original.func) if hasattr(up,
                                                    'flow_values') else None
  usable = flow_lib.usable(values or (), None,
                           getattr(up.ctx.codebase, 'flow', None))
  if flow_lib.UNKNOWN not in usable:
    return None
  info = ref.target
  positional = [a for a in original.args if a.keyword is None and not a.star]
  sig = [p for p in info.params if p not in info.kwonly]
  named = [p for p in sig[1:len(positional)] if p in info.fields]
  if not named:
    return None
  return (f'{up.ctx.code_of(original.func)!r} holds {info.name} by default '
          'and a value the upgrade does not know (a caller\'s): the '
          f'hyper-parameters passed by position ({", ".join(named)}) are '
          f'named by {info.name}\'s signature, and another class may name '
          'them otherwise: pass them by keyword, or rewrite its calls by '
          'hand')
