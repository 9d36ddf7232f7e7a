"""Where a name's values live: a module-level value, an import (across
the codebase's files), the scope that binds a name, the slot of a name
or of an attribute."""

import libcst as cst

from flaxlegacy.upgrade.flow_facts.shared import OTHER  # pylint: disable=g-importing-member
from flaxlegacy.upgrade.flow_facts.shared import UNKNOWN  # pylint: disable=g-importing-member


class NameFacts:
  """Slots of names, imports and attributes (a mixin of ``Flow``)."""

  def _eval_value(self, rel, qual, value):
    if value is None:
      return {UNKNOWN}
    if isinstance(value, tuple):
      tag = value[0]
      if tag == 'value':
        return {value[1]}
      if tag == 'elements':
        out = set()
        for v in self.expr_values(rel, qual, value[1]):
          if v[0] == 'container' and v[1][0] == 'pairs':
            out.add(('pair', v[1][1]))
          elif v[0] == 'container' and v[1] == ('keys',):
            out.add(OTHER)
          elif v[0] == 'container':
            out |= self._container_items(v)
          elif v[0] == 'tuple':
            for i in range(v[2]):
              out |= self.values.get((v[1], i), set())
          else:
            out.add(UNKNOWN)
        return out
      if tag == 'item':
        _, inner, i, n = value
        out = set()
        for v in self._eval_value(rel, qual, inner):
          if v[0] == 'tuple*':  # (optimizer, loss, ...) of optimize()
            out.add(v[1] if i == 0 else OTHER)
          elif v[0] == 'pair' and n == 2:  # (key, value) of T.items()
            out |= self.values.get(v[1], set()) if i == 1 else {OTHER}
          elif v[0] == 'tuple' and v[2] == n:
            out |= self.values.get((v[1], i), set())
          elif v[0] == 'container':
            out |= self._container_items(v)
          else:
            out.add(UNKNOWN)
        return out
      return {UNKNOWN}
    return self.expr_values(rel, qual, value)

  def _container_items(self, v):
    """What iterating (``for x in c``) or unpacking (``a, b = c``) the
    container ``v`` gives: a dict's keys (strings where the facts know
    them all: no legacy object, whatever its values hold; ``d.values()``
    is a container of its own), else its elements."""
    keys = self.literal_dict_keys(v)
    if keys is None:
      return self.values.get(v[1], set())
    out = {OTHER} if keys - {'*'} else set()
    return out | ({UNKNOWN} if '*' in keys else set())

  def _import_value(self, rel, mod, what):
    """Value of an imported name: a codebase module or a name in one."""
    if what is None:  # import a.b.c [as x]
      f = self._file_for_module(rel, mod, 0)
      return {('module', f)} if f else {('ext', mod)}
    name, dots = what
    full = f'{mod}.{name}' if mod else name
    f = self._file_for_module(rel, full, dots)
    if f is not None:  # from pkg import models
      return {('module', f)}
    f = self._file_for_module(rel, mod, dots)
    if f is not None:
      return set(self.values.get(('v', f, '', name), set())) or set()
    return {('ext', full)}

  def _file_for_module(self, rel, mod, dots):
    if dots:
      base = rel.replace('\\', '/').split('/')[:-1]
      base = base[:len(base) - (dots - 1)] if dots > 1 else base
      parts = base + (mod.split('.') if mod else [])
      cands = ['/'.join(parts) + '.py', '/'.join(parts) + '/__init__.py']
      for c in cands:
        if c in self._module_files:
          return c
      return None
    if not mod:
      return None
    cache = self.__dict__.setdefault('_files_by_module', {})  # (add_file clears)
    if mod not in cache:
      cache[mod] = self._file_named(mod)
    return cache[mod]

  def _file_named(self, mod):
    stem = mod.replace('.', '/')
    found = None
    for r in self._module_files:
      s = r[:-3] if r.endswith('.py') else r
      if s.endswith('/__init__'):
        s = s[:-len('/__init__')]
      if s == stem or s.endswith('/' + stem) or stem.endswith('/' + s):
        if found is not None and found != r:
          return None
        found = r
    return found

  # -- names --
  def _resolve_scope(self, rel, qual, name):
    """The scope that binds ``name`` seen from scope ``qual``."""
    s = self.scopes.get((rel, qual))
    first = True
    while s is not None:
      if s.kind != 'class' or first:
        if name in s.bound:
          return s
      first = False
      s = s.parent
    return None

  def _name_slot(self, rel, qual, name):
    s = self._resolve_scope(rel, qual, name)
    if s is None:
      return None
    return ('v', rel, s.qual, name)

  def _attr_slots(self, rel, qual, target, load=False):  # pylint: disable=unused-argument
    """Slots an attribute target / load refers to: one per attribute of a
    class family (``_attr_owner``: set in a base, read in a subclass, or
    the other way, it is one slot)."""
    base = target.value
    attr = target.attr.value
    s = self.scopes.get((rel, qual))
    if (isinstance(base, cst.Name) and s is not None and s.cls
        and base.value == s.self_name):
      return [('a', *self._attr_owner(rel, s.cls), attr)]
    out = []
    for v in self.expr_values(rel, qual, base):
      if v[0] == 'instance':
        out.append(('a', *self._attr_owner(v[1], v[2]), attr))
    return out
