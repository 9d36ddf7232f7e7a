"""Legacy auto-names of submodules built in plain functions and lambdas:
what the rules write (analyses/autoname_stack.py says why, and what
legacy did).

The codebase-wide analysis (which plain functions are stack functions,
which module bodies run a frame of their own) is a fact: analyses/
autoname_stack.py works it out once, before any file is rewritten, and the
codebase keeps it (``codebase.analyses.autoname_stack()``).  This module
reads it for the rules (``role``) and names what they write.

A function reached from code that is not a module body keeps its TODOs.
"""

from flaxlegacy.upgrade.emit import linen as linen_emit

# the shipped helpers, as the emitter writes them
IMPORT = linen_emit.AUTONAME_IMPORT
COUNTER = linen_emit.AUTONAME_COUNTER


def role(up, info, fn=None):
  """'body' where ``info``'s body ``fn`` (a module class's apply, an
  ``@nn.module`` function) runs in a frame of its own and counts from it;
  'function' where it is a stack function (``info.kind == 'function'`` of
  rules/layer_functions.py, a plain function); else None (also for a
  class's other methods)."""
  codebase = up.ctx.codebase
  rel = getattr(up.ctx.facts, 'path', None)
  if rel is None or getattr(codebase, 'flow', None) is None:
    return None
  a = codebase.analyses.autoname_stack()
  if info.kind == 'class':
    if fn is not None and getattr(fn, 'name', None) is not None and (
        fn.name.value != 'apply'):
      return None
    return 'body' if (rel, f'{info.name}.apply') in a.bodies else None
  if info.name in up.ctx.facts.modules:  # an @nn.module function
    return 'body' if (rel, info.name) in a.bodies else None
  return 'function' if (rel, info.name) in a.functions else None
