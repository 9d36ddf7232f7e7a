"""Facts of how the codebase passes each ``apply`` parameter of its module
classes, and the split they refine (facts.py ``CodebaseFacts.
split_by_call_sites``, once the value facts are solved: api.py).

A call site is a life cycle call of a module class (or of a ``.partial``
of one) or a call of an ``nn.Model`` of one, wherever the value facts
(flow.py) follow the callee -- variables, ``self`` attributes, returns,
other files: ``M.init`` / ``create`` / ``call`` (after the rng / params),
``init_by_shape`` / ``create_by_shape`` (after the literal input specs),
``model(...)``.  (Not a call in a module body, ``Block(x, 4)``: legacy
code passes sizes that way, and the rewrite gives a field passed so to the
constructor, ``Block(features=4)(x)``.)  ``collect`` lists, per site and
class, the parameters the site passes positionally (up to a ``*`` splat:
what that fills is not known here); ``.partial`` / ``.shared`` keywords
are ``CodebaseFacts.partial_kwargs`` already, and a parameter passed by
keyword works with either split.  No walk of its own: the value
facts' walk recorded every call (their ``call`` constraints).

``refine_split``: a parameter some call site passes positionally is a
``__call__`` parameter (legacy handed it to ``apply`` with the inputs; a
linen field there is a ``TypeError`` at that call, or a wrong argument),
unless a ``.partial`` binds it somewhere (or may: ``.partial(**config)``),
or it holds a module class the body drives: then it stays a field, and the
model calls that pass a field positionally are recorded in
``CodebaseFacts.positional_field_calls`` for a TODO naming it
(rules/program/models.py): one split cannot be right for both.  (A life
cycle call gives such an argument to the constructor, right either way;
``M.call`` gets a TODO of its own.)  A parameter only bound by ``.partial`` or
passed by keyword keeps the split facts.py made; where no call site is
seen, nothing changes.
"""

import libcst as cst


# life cycle method -> positional arguments ahead of the apply parameters
# (``*_by_shape``: the rng and the specs; the specs stand for as many)
_SKIP = {None: 0, 'init': 1, 'create': 1, 'call': 1, 'init_by_shape': 2,
         'create_by_shape': 2}


def _callee(call):
  f = call.func
  if isinstance(f, cst.Attribute) and f.attr.value in _SKIP:
    return f.attr.value, f.value
  return None, f


def _info(codebase, value):
  f = codebase.files.get(value[1])
  info = f.modules.get(value[2]) if f is not None else None
  return None if info is None or info.problems else info


def _classes(codebase, flow, rel, qual, method, base):
  """('class' | 'model', [ModuleInfo]) of what a call calls."""
  infos, kind = [], 'class'
  for v in flow.expr_values(rel, qual, base):
    if v[0] == 'class' and method is not None:
      info = _info(codebase, v)
    elif v[0] == 'model' and method is None:
      kind = 'model'
      for m in flow.values.get(v[1], ()):
        if m[0] == 'class':
          info = _info(codebase, m)
          if info is not None and info not in infos:
            infos.append(info)
      continue
    else:
      continue
    if info is not None and info not in infos:
      infos.append(info)
  return kind, infos


def _positions(call, method):
  """The apply parameter index of each positional argument of a call,
  up to a ``*`` splat; None where the specs of ``init_by_shape`` are not
  a literal list."""
  skip = _SKIP[method]
  offset = 0
  if method in ('init_by_shape', 'create_by_shape'):
    if len(call.args) < 2 or call.args[1].keyword is not None:
      return None
    specs = call.args[1].value
    if not isinstance(specs, (cst.List, cst.Tuple)) or any(
        isinstance(e, cst.StarredElement) for e in specs.elements):
      return None
    offset = len(specs.elements)
  indices, i = [], 0
  for a in call.args:
    if a.star:
      break  # what a splat fills is not known here
    if a.keyword is not None:
      continue
    if i >= skip:
      indices.append(i - skip + offset)
    i += 1
  return indices


def collect(codebase, flow):
  """Records the call sites the value facts resolve (see the module
  docstring); returns [(rel, call, kind, ModuleInfo, positional params)]."""
  sites = []
  for c in flow.constraints:
    if c[0] != 'call' or not c[3].args:
      continue
    rel, qual, call = c[1], c[2], c[3]
    method, base = _callee(call)
    if not isinstance(base, (cst.Name, cst.Attribute, cst.Call,
                             cst.Subscript)):
      continue
    kind, infos = _classes(codebase, flow, rel, qual, method, base)
    if not infos:
      continue
    indices = _positions(call, method)
    if indices is None:
      continue
    for info in infos:
      params = [info.params[k] for k in indices if k < len(info.params)
                and info.params[k] not in info.kwonly]
      if params:
        sites.append((rel, call, kind, info, params))
  return sites


def _bound(codebase, info, p):
  """Why ``p`` of ``info`` stays a field though a call passes it
  positionally, or None."""
  bound = codebase.partial_kwargs.get(info.name, set())
  if p in bound:
    return 'a .partial binds it'
  if '**' in bound:
    return 'a .partial(**...) may bind it'
  if p in info.driven:
    return 'it holds a module class the body drives'
  return None


def refine_split(codebase, sites):
  """Moves the parameters passed positionally to the call (see the module
  docstring); True if any moved.  Records the model calls that still pass
  a field positionally in ``codebase.positional_field_calls``:
  {(rel, id(call)): why}."""
  moved = False
  for _, _, _, info, params in sites:
    for p in params:
      if p in info.fields and _bound(codebase, info, p) is None:
        info.fields.remove(p)
        info.call.append(p)
        info.call.sort(key=info.params.index)
        moved = True
  return moved


def field_calls(codebase, sites):
  """{(rel, id(call)): why} of the model calls that pass a field
  positionally (after the split is final)."""
  found = {}  # (rel, id(call)) -> [(class, parameter, why)]
  for rel, call, kind, info, params in sites:
    if kind != 'model':
      continue
    for p in params:
      if p in info.fields:
        item = (info.name, p, _bound(codebase, info, p) or 'a field')
        where = found.setdefault((rel, id(call)), [])
        if item not in where:
          where.append(item)
  out = {}
  for key, items in found.items():
    # sorted: the sites come from value sets, whose order is the hash
    # seed's (the TODO text must not change between runs)
    items = sorted(items)
    names = [f'{c}.{p} ({why})' for c, p, why in items[:4]]
    if len(items) > 4:
      names.append(f'{len(items) - 4} more')
    out[key] = ('argument(s) passed positionally here are field(s) of the '
                f'upgraded class: {", ".join(names)}')
  return out
