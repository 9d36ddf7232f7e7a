"""Checkpoints in the program pass.

``checkpoints.restore_checkpoint(d, opt)`` of a TrainState ->
``flaxlegacy.migrate.upgraded.restore_checkpoint(d, opt)`` (plain flax +
serialization, importable with ``FLAXLEGACY=off``), which also reads a
checkpoint the legacy program wrote (converted at load);
``checkpoints.save_checkpoint`` -> ``legacy_checkpoints.save_checkpoint``,
which writes legacy's file format (one msgpack file per step) rather than
today's default Orbax directory.

A mixin of ``programs.ProgramRewriter``; the cases are the table
``CHECKPOINT_FUNCTIONS``."""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade.rules.program import shared

_e = shared.expr_node

CHECKPOINT_IMPORT = ('from flaxlegacy.migrate import upgraded as '
                     'legacy_checkpoints')
# legacy function (qualified) -> (fewest arguments rewritten, what it
# becomes, the report line)
CHECKPOINT_FUNCTIONS = {
    'flax.training.checkpoints.restore_checkpoint': (
        2, 'legacy_checkpoints.restore_checkpoint',
        'restore_checkpoint -> also reads legacy checkpoints'),
    'flax.training.checkpoints.save_checkpoint': (
        0, 'legacy_checkpoints.save_checkpoint',
        'save_checkpoint -> keeps the legacy file format'),
}


class CheckpointRules:
  """``flax.training.checkpoints`` calls."""

  def _call_checkpoint(self, original_node, updated_node):
    """A call of a function of ``CHECKPOINT_FUNCTIONS``."""
    f = original_node.func
    name = cst_util.dotted(f) if isinstance(f, (cst.Name, cst.Attribute)
                                             ) else None
    case = CHECKPOINT_FUNCTIONS.get(self._qualify(name))
    if case is None:
      return None
    fewest, func, what = case
    if len(original_node.args) < fewest:
      return None
    self.imports.add(CHECKPOINT_IMPORT)
    self.note(original_node, what)
    return updated_node.with_changes(func=_e(func))
