"""Checkpoints in the program pass.

``checkpoints.restore_checkpoint(d, opt)`` of a TrainState ->
``flaxlegacy.migrate.upgraded.restore_checkpoint(d, opt)`` (plain flax +
serialization, importable with ``FLAXLEGACY=off``), which also reads a
checkpoint the legacy program wrote (converted at load);
``checkpoints.save_checkpoint`` -> ``legacy_checkpoints.save_checkpoint``,
which writes legacy's file format (one msgpack file per step) rather than
today's default Orbax directory.

A mixin of ``programs.ProgramRewriter``; the cases are the table
``CHECKPOINT_FUNCTIONS``.  A case decides (plans.CheckpointCall); the
pass's emitter (``self.emit``, upgrade/emit/linen.py) writes it."""

import libcst as cst

from flaxlegacy.upgrade import cst_util
from flaxlegacy.upgrade import emit as emit_lib
from flaxlegacy.upgrade import plans

# legacy function (qualified) -> (fewest arguments rewritten, the
# CheckpointCall op, the report line)
CHECKPOINT_FUNCTIONS = {
    'flax.training.checkpoints.restore_checkpoint': (
        2, 'restore', 'restore_checkpoint -> also reads legacy checkpoints'),
    'flax.training.checkpoints.save_checkpoint': (
        0, 'save', 'save_checkpoint -> keeps the legacy file format'),
}


class CheckpointRules:
  """``flax.training.checkpoints`` calls."""

  @property
  def emit(self):
    """The pass's emitter (the file's target): made on first use, as only
    this concept of the pass writes plans so far."""
    em = self.__dict__.get('_emit')
    if em is None:
      em = self.__dict__['_emit'] = emit_lib.emitter(
          self.ctx.target, self, emit_lib.PROGRAM_TARGETS)
    return em

  def _call_checkpoint(self, original_node, updated_node):
    """A call of a function of ``CHECKPOINT_FUNCTIONS``."""
    f = original_node.func
    name = cst_util.dotted(f) if isinstance(f, (cst.Name, cst.Attribute)
                                             ) else None
    case = CHECKPOINT_FUNCTIONS.get(self._qualify(name))
    if case is None:
      return None
    fewest, op, what = case
    if len(original_node.args) < fewest:
      return None
    self.note(original_node, what)
    return self.emit.checkpoint_call(plans.CheckpointCall(op, updated_node))
