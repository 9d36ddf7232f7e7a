"""Rule: FrozenDict methods on linen variables -> the ``flax.core`` functions.

flax 0.3 linen returned FrozenDicts from ``init`` and ``apply(...,
mutable=...)``; today's returns dicts, which have no ``unfreeze`` and whose
``pop`` returns the value alone.  The ``flax.core`` functions take both and
return what the FrozenDict methods returned:

* ``x.unfreeze()`` -> ``flax.core.unfreeze(x)``
* ``rest, value = x.pop('k')`` -> ``rest, value = flax.core.pop(x, 'k')``
  (only unpacked into two names: a dict's own ``pop`` is left alone)
* ``x.copy({...})`` / ``x.copy(add_or_replace=...)`` -> ``flax.core.copy(x,
  ...)`` (a dict's ``copy`` takes no argument)
* ``x.pretty_repr()`` -> ``flax.core.pretty_repr(x)``

Only in files that import flax.
"""

import libcst as cst

from flaxlegacy.upgrade.rules.early_linen import _common

_METHODS = ('unfreeze', 'pop', 'copy', 'pretty_repr')


def relevant(code, names):  # pylint: disable=unused-argument
  return any(f'.{m}(' in code for m in _METHODS)


class Rule(_common.Rule):
  NAME = 'early_linen_frozendict'

  def __init__(self, names, report, needed):
    super().__init__(names, report, needed)
    self._pairs = set()  # ids of .pop calls unpacked into two names

  def visit_Assign(self, node):
    if (len(node.targets) == 1 and isinstance(node.targets[0].target,
                                              cst.Tuple) and
        len(node.targets[0].target.elements) == 2 and
        isinstance(node.value, cst.Call)):
      self._pairs.add(id(node.value))
    return True

  def _function(self, name, receiver, args, node, what):
    func = self.names.spell(f'flax.core.{name}', self.needed)
    self.rewrote(node, what)
    return cst.Call(func=_common.e(func), args=_common.clean_args(
        [cst.Arg(value=receiver)] + list(args)))

  def leave_Call(self, original_node, updated_node):
    f = original_node.func
    if not isinstance(f, cst.Attribute):
      return updated_node
    method = f.attr.value
    receiver = updated_node.func.value
    args = list(updated_node.args)
    if method == 'unfreeze' and not args:
      return self._function('unfreeze', receiver, [], original_node,
                            'x.unfreeze() -> flax.core.unfreeze(x)')
    if method == 'pretty_repr' and not args:
      return self._function('pretty_repr', receiver, [], original_node,
                            'x.pretty_repr() -> flax.core.pretty_repr(x)')
    if (method == 'pop' and id(original_node) in self._pairs and
        len(args) == 1 and args[0].keyword is None and not args[0].star):
      return self._function('pop', receiver, args, original_node,
                            'rest, value = x.pop(k) -> flax.core.pop(x, k)')
    if method == 'copy' and (
        (len(args) == 1 and args[0].keyword is None and
         isinstance(args[0].value, cst.Dict)) or
        (len(args) == 1 and args[0].keyword is not None and
         args[0].keyword.value == 'add_or_replace')):
      return self._function('copy', receiver, args, original_node,
                            'x.copy(add_or_replace) -> flax.core.copy(x, ...)')
    return updated_node
