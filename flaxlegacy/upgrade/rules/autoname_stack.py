"""Legacy auto-names of submodules built in plain functions and lambdas.

Legacy Flax numbered an unnamed submodule on the counter of the module
whose ``apply`` was running when it was built, also where a plain function
called from the body built it (init2winit's vgg ``features()``, a
``conv = nn.Conv.partial(...)`` called in a loop) or a lambda made in one
module and called in another (cold_posterior's ``get_activation_f``
returns ``lambda x, **kw: activations.BiasSELUNorm(x, ...)``, handed to
the blocks and called there: the block's counter).  Linen binds such a
module to the running compact method too, but names it by its own
per-class counter.

The upgrade writes a run-time stack of counters (``autoname_frame`` /
``autoname_counter`` of flaxlegacy/migrate/upgraded.py, shipped in the
tree's one ``legacy_helpers.py``): each compact method whose run can reach
such code is decorated ``@legacy_names.autoname_frame`` (a fresh counter
per call, popped in ``finally``) and counts all its auto-names from that
counter (``legacy_autoname = legacy_names.autoname_counter()``), and the
functions and lambdas name ``f'{Class}_{next(legacy_names.
autoname_counter())}'``, read when the submodule is built.  The shipped
counter raises where the running module is not the frame's owner (a body
this analysis did not mark), so no name is guessed.

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
