"""Rule: a dict splatted into a legacy module call (``M(x, **config)``).

Legacy ``apply(self, inputs, num_layers, mlp_dim, ..., **attention_kwargs)``
binds a splatted dict the Python way: the keys that name parameters go to
those parameters, the rest to the ``**`` catch-all.  The linen class has
the parameters as fields (or ``__call__`` parameters) and the catch-all as
one dict field, so the split has to happen where the keys are known:

* **a dict literal** (``**{'k': v}``, ``**dict(k=v)``): its keys are
  keywords of the call, bound as such;
* **the caller's own catch-all**, forwarded (``Block(x, mlp_dim=m,
  **attention_kwargs)`` inside a module whose ``apply`` takes
  ``**attention_kwargs``): it never holds a parameter of the caller, so
  when every parameter of the callee is a parameter of the caller (or
  passed explicitly), it all goes to the callee's catch-all;
* **otherwise, at run time**: the call reads
  ``**_legacy_kwargs(d, <the class's field names>, <catch-all>, ...)``,
  a small function written once into the upgraded file (plain Python,
  nothing imported) that returns the fields among the keys and the rest as
  the catch-all dict; the keys that are ``__call__`` parameters go to the
  call the same way.  Where ``d`` would be evaluated twice and is not a
  plain name or attribute (a call, a subscript), or several dicts are
  splatted, the call keeps its code with a TODO.

A class without a catch-all takes the same split without ``catch_all``: a
key that is neither a field nor a call parameter raises ``TypeError`` at
run time, as legacy did.
"""

import libcst as cst

HELPER = '_legacy_kwargs'
HELPER_SRC = '''\
def _legacy_kwargs(kwargs, names, catch_all=None, extra=None, elsewhere=None):
  """Keyword arguments of a legacy module call, split for its linen class.

  Returns the entries of ``kwargs`` named in ``names``.  With
  ``catch_all`` (the legacy ``**`` parameter, now a dict field), every
  other entry not named in ``elsewhere`` goes, with those of ``extra``,
  into one dict under that key.  Without it, ``elsewhere`` set (the
  class's call parameters), any other entry is an unexpected argument,
  as it was for the legacy module's apply.
  """
  out = {k: v for k, v in kwargs.items() if k in names}
  rest = dict(extra or {})
  for k, v in kwargs.items():
    if k in names or elsewhere is None or k in elsewhere:
      continue
    if catch_all is None:
      raise TypeError(f'unexpected keyword argument {k!r}')
    if k in rest:
      raise TypeError(f'got multiple values for keyword argument {k!r}')
    rest[k] = v
  if catch_all is not None:
    out[catch_all] = rest
  return out
'''


def _src(node):
  return cst.Module([]).code_for_node(node)


def is_pure(node):
  """A plain name or attribute chain: evaluating it twice is harmless."""
  while isinstance(node, cst.Attribute):
    node = node.value
  return isinstance(node, cst.Name)


def literal_keywords(value):
  """``{'k': v}`` / ``dict(k=v)`` -> [(key, value node)], else None."""
  if isinstance(value, cst.Dict):
    out = []
    for e in value.elements:
      if not isinstance(e, cst.DictElement) or not isinstance(
          e.key, cst.SimpleString):
        return None
      key = e.key.evaluated_value
      if not isinstance(key, str) or not key.isidentifier():
        return None
      out.append((key, e.value))
    return out
  if (isinstance(value, cst.Call) and isinstance(value.func, cst.Name)
      and value.func.value == 'dict'
      and all(a.keyword is not None and not a.star for a in value.args)):
    return [(a.keyword.value, a.value) for a in value.args]
  return None


def forwarded_whole(caller, callee, value, given):
  """Whether ``**value`` is the caller's own catch-all and can hold no
  parameter of the callee (so it all goes to the callee's catch-all)."""
  var_kw = getattr(caller, 'var_kw', None)
  if not var_kw or not isinstance(value, cst.Name) or value.value != var_kw:
    return False
  own = set(caller.params)
  return set(callee.params) - set(given) <= own


def _tuple(names):
  names = list(names)
  if len(names) == 1:
    return f'({names[0]!r},)'
  return '(' + ', '.join(repr(n) for n in names) + ')'


def runtime_split(up, info, value, extra_items, code_of):
  """The (constructor argument, call argument or None) expressions that
  split ``**value`` for ``info``'s linen class at run time, or
  (None, why) when that cannot be done here."""
  names = list(info.fields) + ['name']
  src = _src(value)
  if not is_pure(value) and len(info.call) > 1:
    return None, ('a dict splatted into a module with call parameters: '
                  'its keys are not known here and it cannot be read twice')
  extra = None
  if extra_items:
    extra = '{' + ', '.join(f'{k!r}: {code_of(v)}'
                            for k, v in extra_items) + '}'
  args = [src, _tuple(names)]
  kw = []
  if info.var_kw:
    args.append(repr(info.var_kw))
    if extra:
      args.append(extra)
  kw.append(f'elsewhere={_tuple(info.call)}')
  up.ctx.needed_defs[HELPER] = HELPER_SRC
  ctor = cst.parse_expression(f'{HELPER}({", ".join(args + kw)})')
  call = None
  if len(info.call) > 1:
    call = cst.parse_expression(f'{HELPER}({src}, {_tuple(info.call)})')
  return (ctor, call), None
