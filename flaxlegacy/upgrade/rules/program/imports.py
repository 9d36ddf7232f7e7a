"""Imports after the program pass: ``from flax import optim`` dropped
when nothing uses ``optim`` any more, ``OptimizerDef`` /
``OptimizerState`` names dropped when the definitions were translated, and
the import lines the rules asked for added (``finish``)."""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import walk


def _names_used(module, names, after_dots):
  """Which of ``names`` the module uses outside its import statements;
  ``after_dots``: a name after a dot (``x.optim``) counts too."""
  used = set()

  class V(walk.FastVisitor):

    def visit_Import(self, node):
      return False

    def visit_ImportFrom(self, node):
      return False

    def visit_Attribute(self, node):
      if after_dots:
        return True
      node.value.visit(self)  # not the name after the dot
      return False

    def visit_Name(self, node):
      if node.value in names:
        used.add(node.value)

  module.visit(V())
  return used


def _drop_optim_import(module, optim_locals):
  """Removes ``from flax import optim`` when nothing uses ``optim`` any more."""
  if _names_used(module, optim_locals, after_dots=True):
    return module, False

  class T(walk.FastTransformer):

    def leave_ImportFrom(self, original_node, updated_node):
      if isinstance(updated_node.names, cst.ImportStar):
        return updated_node
      keep = [a for a in updated_node.names
              if (a.asname.name.value if a.asname else cst_util.dotted(
                  a.name)) not in optim_locals]
      if len(keep) == len(updated_node.names):
        return updated_node
      if not keep:
        return cst.RemoveFromParent()
      return updated_node.with_changes(names=cst_util.clean(keep))

    def leave_Import(self, original_node, updated_node):
      keep = [a for a in updated_node.names
              if not (a.asname and a.asname.name.value in optim_locals)]
      if len(keep) == len(updated_node.names):
        return updated_node
      if not keep:
        return cst.RemoveFromParent()
      return updated_node.with_changes(names=cst_util.clean(keep))

  return T().walk(module), True


def _drop_unused_optim_names(module, f):
  """Removes ``from flax.optim[.base] import OptimizerDef, OptimizerState``
  names nothing uses any more (the definitions translated to optax)."""
  names = {l for l, full in f.imports.items() if full in (
      'flax.optim.OptimizerDef', 'flax.optim.base.OptimizerDef',
      'flax.optim.OptimizerState', 'flax.optim.base.OptimizerState')}
  if not names:
    return module, set()
  unused = names - _names_used(module, names, after_dots=False)
  if not unused:
    return module, set()

  class T(walk.FastTransformer):

    def leave_ImportFrom(self, original_node, updated_node):
      if isinstance(updated_node.names, cst.ImportStar) or not (
          (cst_util.dotted(updated_node.module) or '').startswith(
              'flax.optim')):
        return updated_node
      keep = [a for a in updated_node.names
              if (a.asname.name.value if a.asname else cst_util.dotted(
                  a.name)) not in unused]
      if len(keep) == len(updated_node.names):
        return updated_node
      if not keep:
        return cst.RemoveFromParent()
      return updated_node.with_changes(names=cst_util.clean(keep))

  return T().walk(module), unused


def finish(ctx, rw, new):
  """``new`` (the pass's result) with the optim imports nothing uses
  dropped and the imports ``rw`` (the rewriter) asked for added."""
  dropped = False
  if rw.f.optim_locals:
    new, dropped = _drop_optim_import(new, rw.f.optim_locals)
  new, unused = _drop_unused_optim_names(new, rw.f)
  bound = set(ctx.facts.imports) - unused
  if dropped:
    bound -= rw.f.optim_locals
  return cst_util.add_import_lines(new, rw.imports, bound)
