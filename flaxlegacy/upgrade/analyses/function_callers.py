"""Which module-level functions of a codebase only module bodies call.

rules/layer_functions.py rewrites such a function like a body (legacy bound
the layers it builds to the module whose ``apply`` ran it), and the
auto-name stack (analyses/autoname_stack.py) lets it draw auto-names from
the running body's counter; both ask ``candidate``.  The value facts only;
the callers are worked out once (``callers``), kept by the codebase's
Analyses (``codebase.analyses.layer_function_callers()``).
"""

import libcst as cst


def _call_name(func):
  if isinstance(func, cst.Name):
    return func.value
  if isinstance(func, cst.Attribute):
    return func.attr.value
  return None


def callers(codebase):
  """{(rel, function name): set of caller scopes (rel, qual)}, for the
  module-level functions of the codebase, from the value facts."""
  out = {}
  flow = getattr(codebase, 'flow', None)
  if flow is not None:
    top = {}
    for (rel, qual), d in flow.defs.items():
      if '.' not in qual and not d.is_method:
        top.setdefault(qual, []).append(rel)
    for c in flow.constraints:
      if c[0] != 'call':
        continue
      name = _call_name(c[3].func)
      if name not in top:
        continue
      for v in flow.expr_values(c[1], c[2], c[3].func):
        if v[0] == 'func' and v[2] == name:
          out.setdefault((v[1], name), set()).add((c[1], c[2]))
  return out


def _module_body(codebase, rel, qual):
  """Whether scope ``qual`` of ``rel`` is a legacy module's body."""
  f = codebase.files.get(rel)
  if f is None:
    return False
  if qual.endswith('.apply') and qual.count('.') == 1:
    info = f.modules.get(qual.split('.')[0])
    return info is not None and info.kind == 'class'
  info = f.modules.get(qual)
  return info is not None and info.kind == 'function'


def candidate(codebase, rel, name):
  """Whether top-level function ``name`` of ``rel`` is called only from
  module bodies, and nothing else can call it (the facts' condition; the
  function's body decides the rest)."""
  flow = getattr(codebase, 'flow', None)
  f = codebase.files.get(rel)
  if flow is None or f is None or not f.nn_prefixes:
    return False
  if name in f.modules or name in getattr(f, 'partial_helpers', ()):
    return False  # (helpers returning X.partial have their own rule)
  d = flow.defs.get((rel, name))
  if d is None or d.is_method or d.node.decorators or d.escapes or d.open or (
      not d.called):
    return False
  found = codebase.analyses.layer_function_callers().get((rel, name))
  return bool(found) and all(_module_body(codebase, r, q)
                             for r, q in found)
