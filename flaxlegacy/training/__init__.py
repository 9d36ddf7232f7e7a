"""Legacy ``flax.training`` pieces whose semantics today's Flax changed.

Only ``checkpoints`` lives here: the legacy single-file msgpack checkpoints
with legacy semantics, atomic writes and clear errors (docs/checkpoints.md).
Everything else in ``flax.training`` is used from Flax itself.
"""
