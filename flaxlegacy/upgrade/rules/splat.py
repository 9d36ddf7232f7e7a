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
  a small function the emitter writes once into the upgraded file (plain
  Python, nothing imported; the rule decides a ``SplitKwargs`` plan) that returns the fields among the keys and the rest as
  the catch-all dict; the keys that are ``__call__`` parameters go to the
  call the same way.  Where ``d`` would be evaluated twice and is not a
  plain name or attribute (a call, a subscript), or several dicts are
  splatted, the call keeps its code with a TODO.

A class without a catch-all takes the same split without ``catch_all``: a
key that is neither a field nor a call parameter raises ``TypeError`` at
run time, as legacy did.
"""

import libcst as cst

from flaxlegacy.upgrade import plans

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


def runtime_split(up, info, value, extra_items):
  """The (constructor argument, call argument or None) expressions that
  split ``**value`` for ``info``'s class at run time (SplitKwargs plans,
  written by ``up``'s emitter), or (None, why) when that cannot be done
  here."""
  if not is_pure(value) and len(info.call) > 1:
    return None, ('a dict splatted into a module with call parameters: '
                  'its keys are not known here and it cannot be read twice')
  ctor = up.emit.split_kwargs(plans.SplitKwargs(
      value=value, names=tuple(info.fields) + ('name',),
      catch_all=info.var_kw or None, extra=tuple(extra_items),
      elsewhere=tuple(info.call)))
  call = None
  if len(info.call) > 1:
    call = up.emit.split_kwargs(plans.SplitKwargs(
        value=value, names=tuple(info.call)))
  return (ctor, call), None
