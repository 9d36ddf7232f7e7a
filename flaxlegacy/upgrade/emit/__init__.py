"""Emitters: plans (upgrade/plans.py) -> the target's code.

One emitter class per target; a rewriter holds one instance, made by
``emitter(target, rw)``.  Only ``'linen'`` exists today (linen + optax);
an NNX target adds its class here and reuses the rules and their plans.
Emitters import no rule (tests/test_upgrade_layers.py).
"""

from flaxlegacy.upgrade.emit import linen

TARGETS = {'linen': linen.LinenEmitter}
# the program pass's (rules/programs.py; only checkpoints write plans yet)
PROGRAM_TARGETS = {'linen': linen.LinenProgramEmitter}


def emitter(target, rw, table=None):
  """The emitter of ``target`` writing for the rewriter ``rw`` (from
  ``table``: TARGETS, or PROGRAM_TARGETS for the program pass)."""
  cls = (TARGETS if table is None else table).get(target)
  if cls is None:
    raise ValueError(f'unknown upgrade target {target!r}: known targets are '
                     f'{sorted(TARGETS if table is None else table)}')
  return cls(rw)
