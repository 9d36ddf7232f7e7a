"""Rule: a value that holds legacy layers, module classes (or ``.partial``s
of them) and plain functions, called legacy-style in a module body.

Research code hands layers to its modules and calls them as legacy did::

    def get_norm(kind, train):
      if kind == 'bn':
        return nn.BatchNorm.partial(use_running_average=not train)
      elif kind == 'ln':
        return nn.LayerNorm
      def identity(x, name=None):
        return x
      return identity

    class Block(nn.Module):
      def apply(self, x, features, conv, norm_kind='bn', train=True):
        norm = get_norm(norm_kind, train)
        y = conv(x, features, (3, 3), name='conv1')   # conv: a field
        return norm(y)

Linen constructs, then calls: ``nn.Conv(features, (3, 3), name=...)(x)``;
which keywords are fields and which ``__call__`` arguments is the class's,
and a plain function takes the call as written.  Where the values the
codebase gives the callee (flow.py) are all known -- legacy layers whose
``.partial`` the upgrade rewrote (``functools.partial`` of the linen
layer), module classes the upgrade converts (or their partials), plain
functions of the codebase -- but no one split serves them all (different
classes, or a function among them), the call becomes::

    _legacy_layer_call(norm, ('features', 'kernel_size'), legacy_autoname,
                       y, 8, (3, 3))

a small function written into the upgraded file (plain linen): for a
module class it names the positional hyper-parameters (every possible
class must give the same positions the same names: else a TODO), splits
the keywords by the dataclass fields of the class it holds at run time,
constructs it inside the calling module (the legacy name, or the legacy
auto-name ``<Class>_<n>`` from the body's counter: only a module takes a
number, as in legacy) and calls it on the inputs; a plain function is
called with the arguments as written.

A value the facts do not follow (a caller's argument) next to known ones
is served by the same split: at run time it is a linen module class or a
partial of one (split by its own fields), a function (called as written),
or something that cannot be called (a TypeError, as in legacy); only the
names of positional hyper-parameters come from the known values, so a call
passing any keeps a TODO there.

Not rewritten (the call keeps a TODO): a legacy layer the upgrade ships
its own linen version of (``GroupNorm``) held bare, not through a
``.partial`` with keywords, a layer without an argument linen needs for
the legacy numbers (``use_running_average``), a keyword a layer spells
otherwise in linen (``bias`` -> ``use_bias``: the spelling depends on the
class), ``*args`` / ``**kwargs``, positions the classes name differently.
"""


from flaxlegacy.upgrade import flow as flow_lib
from flaxlegacy.upgrade import layer_table
from flaxlegacy.upgrade import plans
from flaxlegacy.upgrade.rules import _shared

EXTRA = 'mixed'  # Ref('class', Values, EXTRA)
# the values (flow.py) that a call takes as written: a def of the codebase,
# a lambda or a builtin
FUNCTION_KINDS = ('func', 'function')


class Values:
  """What a callee holds: ``layers`` (layer_table.Layer, keyword sets),
  ``infos`` (ModuleInfo), ``funcs`` (whether a plain function is among
  them).  ``fields`` / ``call`` / ``params`` are empty: the split is the
  run time's."""
  fields = ()
  call = ()
  params = ()
  driven = ()
  problems = ()
  name = None

  def __init__(self, layers, infos, funcs, unknown=False):
    self.layers = layers
    self.infos = infos
    self.funcs = funcs
    # a value the facts do not follow (a caller's argument ...) is among
    # them: the run time's split serves it too, but only the known values
    # name the positions (see ``call``)
    self.unknown = unknown


def check(codebase, values):
  """(Ref, None) when ``values`` (what a called expression holds, flow.py)
  are all known and a call of it can be split at run time; (None, why) when
  some value rules that out; (None, None) when nothing here applies."""
  if not values:
    return None, None
  usable = flow_lib.usable(values, None, getattr(codebase, 'flow', None))
  layers, infos, funcs, unknown = [], [], False, False
  for v in sorted(usable, key=repr):
    if v[0] in FUNCTION_KINDS:
      funcs = True
    elif v == flow_lib.UNKNOWN:
      unknown = True
    elif v[0] == 'layer':
      layer = layer_table.LAYERS.get(v[1])
      if layer is None or layer.linen in layer_table.SHIPPED and not v[2]:
        # a layer flaxlegacy ships its own linen version of is that
        # version where a .partial(...) with keywords made the value (the
        # partial rules rewrite it, or keep a TODO there); a bare
        # reference would be linen's own
        return None, (f'it holds legacy {v[1]}, which this upgrade does not '
                      'pass around')
      layers.append((layer, v[2]))
    elif v[0] == 'class':
      f = codebase.files.get(v[1])
      info = f.modules.get(v[2]) if f is not None else None
      if info is None or info.problems:
        return None, (f'it holds {v[2]}, not a module class the upgrade '
                      'converts')
      infos.append(info)
    else:
      return None, None
  if not layers and not infos:
    return None, None
  return _shared.Ref('class', Values(layers, infos, funcs, unknown),
                     EXTRA), None


def with_functions(codebase, values):
  """For a hyper-parameter whose default is a module class: where the
  values the codebase gives it hold a function (a def, a lambda, a
  builtin) next to module classes, no split by the classes serves the
  function (it takes the call as written): ``check``'s answer, a why where
  it has none.  (None, None) where no function is among them."""
  usable = flow_lib.usable(values or (), None,
                           getattr(codebase, 'flow', None))
  if not any(v[0] in FUNCTION_KINDS for v in usable) or not any(
      v[0] in ('class', 'layer') for v in usable):
    return None, None
  ref, why = check(codebase, values)
  if ref is None and not why:
    why = ('it holds module classes and functions, and values the upgrade '
           'does not know')
  return ref, why


def _positional_names(values, count):
  """The legacy names of positions 1..count-1 (after the input), the same
  for every module value, or (None, why)."""
  names = None
  sigs = [('inputs',) + layer.params for layer, _ in values.layers]
  for info in values.infos:
    if info.var_pos or not info.params or info.params[0] in info.fields:
      return None, (f'{info.name} takes *args or no input first')
    sigs.append(tuple(p for p in info.params if p not in info.kwonly))
  for sig in sigs:
    if count > len(sig):
      return None, 'more positional arguments than a legacy apply takes'
    got = sig[1:count]
    if names is not None and got != names:
      return None, ('its classes name the positional hyper-parameters '
                    'differently')
    names = got
  return names, None


def _keyword_problem(values, keys):
  """Why the keywords ``keys`` of a call cannot be split at run time, or
  None."""
  for layer, bound in values.layers:
    for k in keys:
      if k in layer.renames:
        return (f'legacy {layer.legacy} spells {k!r} otherwise in linen '
                f'({layer.renames[k]!r}), and the class is known only at '
                'run time')
      if (layer.legacy, k) in layer_table.UNSUPPORTED_ARGS:
        return layer_table.UNSUPPORTED_ARGS[(layer.legacy, k)]
      if k not in layer.params:
        return f'legacy {layer.legacy} takes no {k!r}'
    missing = [k for k in layer.add_kwargs if k not in bound and k not in keys]
    if missing:
      return (f'legacy {layer.legacy} without {missing}, which linen needs '
              'for the legacy numbers')
  for info in values.infos:
    for k in keys:
      if k not in info.params and not info.var_kw:
        return f'{info.name} takes no {k!r}'
  return None


def call(up, original, updated, ref):
  """The rewritten call (``_legacy_layer_call(...)``), or ``updated``
  after a TODO."""
  values = ref.target
  name = up.ctx.code_of(original.func)
  args = list(updated.args)
  if any(a.star for a in args):
    up.todo(original, f'{name!r} holds legacy layers or modules known only '
            'at run time: *args / **kwargs only each class\'s signature can '
            'split: rewrite its calls by hand')
    return updated
  positional = [a for a in args if a.keyword is None]
  keywords = [a for a in args if a.keyword is not None]
  if not positional or args.index(positional[-1]) != len(positional) - 1:
    up.todo(original, f'{name!r}: a legacy module call needs its input '
            'first: rewrite its calls by hand')
    return updated
  if values.unknown and len(positional) > 1:
    up.todo(original, f'{name!r} holds legacy layers or modules, and a '
            'value the upgrade does not know: the positional '
            'hyper-parameters are named by the known classes only, and '
            'that value may name them otherwise: rewrite its calls by hand '
            '(or pass them by keyword)')
    return updated
  names, why = _positional_names(values, len(positional))
  keys = [a.keyword.value for a in keywords]
  why = why or _keyword_problem(values, list(names or ()) + [
      k for k in keys if k != 'name'])
  if why:
    up.todo(original, f'{name!r} holds legacy layers or modules known only '
            f'at run time: {why}: rewrite its calls by hand')
    return updated
  if 'name' in keys:
    counter = None
  else:
    plan = up._auto_name_plan(original, None, 'cls')  # pylint: disable=protected-access
    if plan is None or plan.counter is None:
      up.todo(original, 'cannot tell the legacy auto-name')
      return updated
    counter = plan.counter
  up.rewrote(original, 'called_layers', 'call of a value holding legacy '
             'layers / modules / functions -> split at run time')
  return up.emit.runtime_layer_call(plans.RuntimeLayerCall(
      callee=updated.func, positional=tuple(names), counter=counter,
      args=tuple(args)))
