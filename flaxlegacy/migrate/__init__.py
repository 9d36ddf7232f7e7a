"""From legacy ``flax.nn`` / ``flax.optim`` to linen + optax, gradually.

* ``to_train_state(optimizer)`` / ``from_train_state``: a legacy Optimizer as
  a ``flax.training.train_state.TrainState`` and back (train_state.py).
* ``LegacyModule`` (a legacy module inside linen) and ``LinenModule`` (a
  linen module inside a legacy one), with ``legacy_variables`` (bridge.py).
* ``linen_params``, ``batch_stats_from_collection``,
  ``collection_from_batch_stats``: legacy -> linen names (names.py);
  ``rename_params``: the exact rename map of ``flaxlegacy upgrade --names
  linen`` applied to a parameter tree (plain flax, FLAXLEGACY=off).
* ``convert_checkpoint`` / ``flaxlegacy convert CKPT OUT``: a legacy
  checkpoint as a TrainState checkpoint (convert.py).
* ``flaxlegacy check PATH``: the scanner (check.py).
* What code rewritten by ``flaxlegacy upgrade`` imports (plain linen, no
  compatibility layer): ``upgraded`` (program helpers, checkpoints) and
  ``legacy_cells`` (linen RNN cells whose ``features`` comes from the
  carry, as legacy's).
* ``verify_upgrade(...)``: an upgraded (``flaxlegacy upgrade``) module class
  against its legacy original, on the same perturbed parameters
  (flaxlegacy/upgrade/verify.py).

The walk-through is docs/migration.md.  Attributes load lazily, so
``flaxlegacy check`` does not import JAX.
"""

import importlib

_EXPORTS = {
    'to_train_state': 'train_state',
    'from_train_state': 'train_state',
    'TrainState': 'train_state',
    'LegacyModule': 'bridge',
    'LinenModule': 'bridge',
    'legacy_variables': 'bridge',
    'linen_variables_in_legacy': 'bridge',
    'linen_params': 'names',
    'rename_params': 'names',
    'load_rename_map': 'names',
    'batch_stats_from_collection': 'names',
    'collection_from_batch_stats': 'names',
    'convert_checkpoint': 'convert',
    'legacy_to_train_state': 'convert',
    'modern_optax': 'convert',
    'transplant_state': 'convert',
    'ConversionError': 'convert',
    'verify_upgrade': '_upgrade',
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
  if name in _EXPORTS:
    module = importlib.import_module(
        'flaxlegacy.upgrade.verify' if _EXPORTS[name] == '_upgrade' else
        f'flaxlegacy.migrate.{_EXPORTS[name]}')
    if name == 'verify_upgrade':
      return module.verify_module
    return getattr(module, name)
  raise AttributeError(f"module 'flaxlegacy.migrate' has no attribute "
                       f'{name!r}')
