"""Facts of module aliases and of modules held by hyper-parameters.

(rules/aliases.py rewrites with them; its docstring tells the idioms.)
``collect_facts`` records, per file, ``partial_aliases`` (name -> the
``X.partial(...)`` call node) and ``bound_values`` ((owner name, keyword)
-> set of value sources, ``None`` for a value that is not a plain name);
``root_info`` / ``field_values`` / ``is_module_name`` read them across the
codebase, ``propagate_partial_kwargs`` adds an alias's keywords to its
class's (facts.py ``CodebaseFacts.finish``).
"""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import walk


def collect_facts(file_facts, module, code_of):
  """Adds ``partial_aliases`` and ``bound_values`` to ``file_facts``."""
  aliases = {}
  for stmt in module.body:
    if not isinstance(stmt, cst.SimpleStatementLine):
      continue
    for s in stmt.body:
      if (isinstance(s, cst.Assign) and len(s.targets) == 1
          and isinstance(s.targets[0].target, cst.Name)
          and _is_partial_call(s.value)):
        aliases[s.targets[0].target.value] = s.value
  file_facts.partial_aliases = aliases
  bound = {}

  class V(walk.FastVisitor):

    def visit_Call(self, node):
      f = node.func
      if isinstance(f, cst.Attribute) and f.attr.value == 'partial':
        owner = cst_util.dotted(f.value)
      elif isinstance(f, cst.Name):
        owner = f.value
      else:
        return
      if not owner:
        return
      owner = owner.split('.')[-1]
      for a in node.args:
        if a.keyword is None or a.star:
          continue
        v = a.value
        src = cst_util.dotted(v) if isinstance(v, (cst.Name,
                                                     cst.Attribute)) else None
        bound.setdefault((owner, a.keyword.value), set()).add(
            src.split('.')[-1] if src else None)

  if file_facts.nn_prefixes or aliases or file_facts.partial_kwargs:
    module.visit(V())
  file_facts.bound_values = bound


def _is_partial_call(v):
  return (isinstance(v, cst.Call) and isinstance(v.func, cst.Attribute)
          and v.func.attr.value == 'partial'
          and isinstance(v.func.value, (cst.Name, cst.Attribute)))


def alias_call(codebase, file_facts, name):
  """The ``X.partial(...)`` call node a module-level alias stands for."""
  own = getattr(file_facts, 'partial_aliases', {})
  if name in own:
    return own[name], file_facts
  if file_facts is not None and name in file_facts.modules:
    return None, None
  for f in codebase.files.values():
    a = getattr(f, 'partial_aliases', {})
    if name in a:
      return a[name], f
  return None, None


def root_info(codebase, file_facts, name, depth=0):
  """The ModuleInfo a class name or (a chain of) aliases ends in."""
  if not name or depth > 8:
    return None
  info = codebase.module(file_facts, name) if file_facts else (
      codebase.modules.get(name))
  if info is not None:
    return info
  call, ff = alias_call(codebase, file_facts, name)
  if call is None:
    return None
  inner = cst_util.dotted(call.func.value)
  return root_info(codebase, ff, inner.split('.')[-1] if inner else None,
                   depth + 1)


def is_module_name(codebase, name):
  """A legacy module class, or an alias of one (for the programs pass)."""
  if not name:
    return False
  if name in codebase.modules:
    return True
  return root_info(codebase, None, name) is not None


def propagate_partial_kwargs(codebase):
  """Keywords an alias's ``.partial`` binds are bound for its class too."""
  for f in codebase.files.values():
    for name, call in getattr(f, 'partial_aliases', {}).items():
      info = root_info(codebase, f, name)
      if info is None:
        continue
      keys = codebase.partial_kwargs.setdefault(info.name, set())
      keys.update(codebase.partial_kwargs.get(name, set()))
      for a in call.args:
        if a.keyword is not None:
          keys.add(a.keyword.value)


def field_values(codebase, info, field):
  """Every value the codebase binds to ``info``'s parameter ``field``."""
  values = set()
  owners = {info.name}
  for f in codebase.files.values():
    for alias in getattr(f, 'partial_aliases', {}):
      if root_info(codebase, f, alias) is info:
        owners.add(alias)
  for f in codebase.files.values():
    for (owner, key), vals in getattr(f, 'bound_values', {}).items():
      if owner in owners and key == field:
        values |= vals
  default = info.defaults.get(field)
  if default is not None and default != 'None':
    values.add(default if default.isidentifier() else None)
  return values
