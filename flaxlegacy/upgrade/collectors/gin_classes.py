"""Which gin-configurable legacy modules take ``@gin.configurable`` on the
linen class (facts.py ``CodebaseFacts.split_by_call_sites`` calls
``decide`` once the value facts are solved).

gfsa puts ``@gin.configurable("Name")`` on every layer's ``apply`` (and
under ``@nn.module`` on its step functions): gin gave the hyper-parameters
each time ``apply`` ran.  Upgraded, those are dataclass fields, which gin
reaches only when it wraps the class (it then wraps the dataclass
``__init__``: a binding ``Name.p`` / ``scope/Name.p`` gives ``p`` where
the module is built, inside the parent's compact call -- in the same
``gin.config_scope`` as legacy's apply -- and a field whose default is
``gin.REQUIRED`` raises gin's error for a missing binding).  So the
decorator moves to the class where every parameter gin can give is a
field; a ``__call__`` parameter it could give becomes a field where that is
certain:

* it is gin's for certain: its default is ``gin.REQUIRED``, a binding of
  the codebase names it (``.gin`` files, ``gin.parse_config`` texts,
  ``gin.bind_parameter``: flow_facts/gin.py), or it has no default and a
  call site the value facts see leaves it out (only gin can give it);
* and no call site passes it positionally (legacy handed it in with the
  inputs there), and it is not the input (the first parameter).

The decorator stays on ``__call__`` with its TODO (rules/modules.py) where
any of this is not certain: another decorator beside it; a bare
``@gin.configurable`` on ``apply`` (it registered the name ``apply``); a
class that has subclasses (linen writes each subclass an ``__init__`` of
its own, which gin would not wrap), one made ``.shared``, or one whose base
is not ``nn.Module``; a gin-given parameter passed positionally; or,
where the codebase's bindings of the configurable are not all known (none
names it, or one is built at run time), a ``__call__`` parameter that a
binding from outside could give (one with a default that some call site
leaves out, or any when no call site is seen).
"""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade.collectors import call_sites


def configurable_name(decorator, imports, default):
  """The name a lone ``@gin.configurable`` / ``@gin.configurable("Name",
  ...)`` decorator registers (``default``: the def's own name where that
  is the class's, else None), or None for another decorator."""
  e = decorator.decorator
  call = e if isinstance(e, cst.Call) else None
  name = cst_util.dotted(call.func if call is not None else e) or ''
  head, _, rest = name.partition('.')
  full = imports.get(head, head) + ('.' + rest if rest else '')
  if full not in ('gin.configurable', 'gin.config.configurable'):
    return None
  if call is None:
    return default
  for a in call.args:
    if a.star:
      return None
    if a.keyword is None or a.keyword.value == 'name':
      if isinstance(a.value, cst.SimpleString):
        v = a.value.evaluated_value
        return v if isinstance(v, str) and v else None
      return None
  return default


def _required(default):
  return default is not None and default.strip().split('.')[-1] == 'REQUIRED'


def _sites(codebase, flow):
  """{id(ModuleInfo): [(positional parameter indices or None, keywords,
  splat)]} of the calls of each module the value facts see: in bodies
  (``Block(x, 4)``, a ``.partial`` of it called), life cycle calls
  (``M.init(rng, x)``), model calls."""
  out = {}
  for c in flow.constraints:
    if c[0] != 'call':
      continue
    rel, qual, call = c[1], c[2], c[3]
    method, base = call_sites._callee(call)  # pylint: disable=protected-access
    if not isinstance(base, (cst.Name, cst.Attribute, cst.Call,
                             cst.Subscript)):
      continue
    found = []
    if method is None:
      for v in flow.expr_values(rel, qual, base):
        if v[0] == 'class':
          info = call_sites._info(codebase, v)  # pylint: disable=protected-access
          if info is not None:
            found.append((info, v[3]))
    _, infos = call_sites._classes(codebase, flow, rel, qual, method, base)  # pylint: disable=protected-access
    found += [(i, frozenset()) for i in infos]
    if not found:
      continue
    indices = call_sites._positions(call, method)  # pylint: disable=protected-access
    keys = {a.keyword.value for a in call.args if a.keyword is not None}
    splat = any(a.star for a in call.args)
    for info, bound in found:
      out.setdefault(id(info), []).append(
          (indices, keys | set(bound), splat or '**' in bound))
  return out


def _subclassed(codebase):
  names = set()
  for f in codebase.files.values():
    for info in f.modules.values():
      if info.base != 'Module':
        names.add(info.base.split('.')[-1])
    for written, _ in f.foreign_subclasses.values():
      names.add(written.split('.')[-1])
  return names


def _why_not(codebase, info, sites, targets, subclassed):
  """(None, the parameters to make fields) where the decorator can go on
  the class, else (why not, None)."""
  name = info.gin
  if info.kind == 'class' and info.base != 'Module':
    return 'its base is not nn.Module', None
  if info.name in subclassed:
    return ('it has subclasses (linen gives each an __init__ of its own, '
            'which gin would not wrap)'), None
  if info.name in codebase.shared_classes:
    return 'it is made .shared', None
  if info.var_pos or info.var_kw:
    return 'it takes *args / **kwargs', None
  named = {p for c, p in targets if c == name and p}
  known = (any(c == name for c, _ in targets)
           and (None, None) not in targets and (name, None) not in targets)
  partial = codebase.partial_kwargs.get(info.name, set())
  move = []
  for p in info.call:
    i = info.params.index(p)
    default = info.defaults.get(p)
    passed = [(i in idx if idx is not None else None, p in keys, splat)
              for idx, keys, splat in sites]
    positional = any(pos is not False for pos, _, _ in passed)
    left_out = [pos is False and not kw and not splat
                for pos, kw, splat in passed]
    gin_given = (_required(default) or p in named or (
        default is None and any(left_out) and p not in partial))
    if gin_given:
      if i == 0 or positional or p in info.driven:
        return (f'gin can give {p!r}, which stays a __call__ parameter '
                '(the input, or passed positionally)'), None
      move.append(p)
    elif not known and i > 0 and (not sites or (
        default is not None and any(left_out))):
      return (f'a gin binding from outside the codebase may give {p!r} '
              '(a __call__ parameter)'), None
  return None, move


def decide(codebase, flow):
  """Sets ``info.gin_class`` (the parameters made fields) on the modules
  whose ``@gin.configurable`` goes on the linen class, and moves those
  parameters from ``info.call`` to ``info.fields``; ``info.gin_why`` says
  why not on the others."""
  if flow is None:
    return
  targets = getattr(flow, 'gin_targets', set())
  sites = None
  subclassed = None
  for f in codebase.files.values():
    for info in f.modules.values():
      if info.gin is None or info.problems:
        continue
      if sites is None:
        sites = _sites(codebase, flow)
        subclassed = _subclassed(codebase)
      why, move = _why_not(codebase, info, sites.get(id(info), []),
                           targets, subclassed)
      if why is not None:
        info.gin_why = why
        continue
      for p in move:
        info.call.remove(p)
        info.fields.append(p)
      info.fields.sort(key=info.params.index)
      info.gin_class = move
