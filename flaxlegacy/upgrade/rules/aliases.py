"""Module aliases and modules held by hyper-parameters.

Two legacy idioms name a module without defining a class (the PixelCNN++
example uses both):

* **Module-level partial aliases.** ``ConvTranspose = Conv.partial(
  transpose=True)`` at the top level of a file (also an alias of an alias,
  ``Halve = ConvDown_.partial(strides=(2, 2))``).  A call of the alias is a
  call of the class with those arguments bound; its legacy auto-name is the
  class's (``Module.partial`` keeps ``__name__``).  The rewrite calls the
  ``functools.partial`` the alias becomes (``ConvTranspose(features=...)
  (x)``), and ``X.partial`` of an alias becomes ``functools.partial(X,
  ...)``.
* **A module passed as a hyper-parameter.** ``GatedResnet.partial(
  conv_module=ConvDown)`` ... ``conv_module(x, c)`` in ``GatedResnet``.
  Where every binding of that parameter the codebase shows (``.partial``
  keywords and call keywords, through aliases) is a legacy module class,
  and all of them split their parameters the same way, the call is rewritten
  as a call of such a module (``self.conv_module(features=c)(x)``), named
  at run time from ``self.conv_module.__name__`` as legacy names it.
  Otherwise the call keeps its code and gets a TODO.

``collect_facts`` records, per file, ``partial_aliases`` (name -> the
``X.partial(...)`` call node) and ``bound_values`` ((owner name, keyword)
-> set of value sources, ``None`` for a value that is not a plain name).
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


def resolve_alias(resolver, name):
  """A Ref('partial', ...) for a module-level alias, or None."""
  ctx = resolver.up.ctx
  call, _ = alias_call(ctx.codebase, ctx.facts, name)
  if call is None:
    return None
  inner = resolver(call.func.value)
  if inner is None or inner.kind not in ('layer', 'class', 'partial'):
    return None
  from flaxlegacy.upgrade.rules.modules import Ref  # pylint: disable=g-import-not-at-top
  return Ref('partial', inner, call)


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


def resolve_field_module(resolver, name):
  """Ref('class', info, 'field') for a parameter that holds a module.

  Returns (ref or None, why-not or None): why-not is set when the field is
  bound to modules but the call cannot be rewritten with certainty.
  """
  up = resolver.up
  info = getattr(up, 'info', None)
  if info is None or name not in getattr(up, 'fields', ()):
    return None, None
  ctx = up.ctx
  values = field_values(ctx.codebase, info, name)
  infos = [root_info(ctx.codebase, ctx.facts, v) for v in values]
  if not values or all(i is None for i in infos):
    return None, None
  if None in infos or any(ctx.codebase.module(ctx.facts, v) is None
                          for v in values):
    return None, (f'{name!r} holds a module here, but not always a plain '
                  f'legacy module class ({sorted(map(str, values))}): '
                  'rewrite its calls by hand')
  first = infos[0]
  for i in infos[1:]:
    if (i.params, i.fields, i.call, i.var_kw) != (
        first.params, first.fields, first.call, first.var_kw):
      return None, (f'{name!r} holds modules with different parameters '
                    f'({sorted(values)}): rewrite its calls by hand')
  from flaxlegacy.upgrade.rules.modules import Ref  # pylint: disable=g-import-not-at-top
  return Ref('class', first, 'field'), None
