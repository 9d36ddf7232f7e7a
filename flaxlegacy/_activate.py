"""Activation: JAX aliases and legacy policies, applied once per process.

``activate()`` runs when a legacy path (``flax.nn``, ``flax.optim``,
``flax.deprecated``) is first imported, when ``flaxlegacy.nn`` /
``flaxlegacy.optim`` are imported directly, under ``python -m flaxlegacy``,
or when user code calls ``flaxlegacy.activate()``.  It

1. installs the import hook (for environments that skip .pth files);
2. adds the JAX, NumPy and Python names legacy code used and today's
   releases removed (``_names.ALIASES``), each only where the name is absent;
3. applies the legacy policies (``_names.POLICIES``): the legacy PRNG stream
   and legacy msgpack checkpoints, and restores the JAX behaviour legacy code
   relied on (``_names.BEHAVIOURS``, ``_behaviour``), each with an
   environment opt-out, and announces them once in the log.

With ``FLAXLEGACY=on`` the start-up hook calls ``activate()`` as soon as
``jax`` has been imported (``_hook._install_at_startup``).
"""

import importlib
import logging
import os
import sys
import threading
import types

from flaxlegacy import _behaviour
from flaxlegacy import _fallback
from flaxlegacy import _hook
from flaxlegacy import _names

logger = logging.getLogger('flaxlegacy')

_lock = threading.RLock()
_state = {'active': False, 'activating': False, 'aliases': (),
          'policies': {}}

_OFF = ('off', '0', 'false', 'no', 'modern')
_ON = ('on', '1', 'true', 'yes', 'legacy')


# --- small replacements named '@name' in _names.JAX_ALIASES --------------


def _index_op(method):
  def op(x, idx, y, indices_are_sorted=False, unique_indices=False):
    import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
    ref = getattr(jnp.asarray(x).at[idx], method)
    return ref(y, indices_are_sorted=indices_are_sorted,
               unique_indices=unique_indices)
  op.__name__ = 'index_' + {'set': 'update', 'multiply': 'mul'}.get(method,
                                                                    method)
  op.__doc__ = (f'Legacy ``jax.ops.{op.__name__}(x, idx, y)``: '
                f'``jnp.asarray(x).at[idx].{method}(y)``.')
  return op


def _shuffle(key, x, axis=0):
  """Legacy ``jax.random.shuffle``: shuffles each slice independently."""
  import jax  # pylint: disable=g-import-not-at-top
  return jax.random.permutation(key, x, axis=axis, independent=True)


def _tie_in(x, y):  # pylint: disable=unused-argument
  """Legacy ``lax.tie_in``: a no-op since jax 0.2.0."""
  return y


def _normalize(x, axis=-1, mean=None, variance=None, epsilon=1e-5):
  """Legacy ``jax.nn.normalize``: unclipped ``E[x^2] - E[x]^2`` variance.

  Not ``jax.nn.standardize``: that clips the variance at 0, which differs
  where rounding makes it negative.  Same formula as
  ``flaxlegacy.nn.activation.normalize`` (not imported here: activation
  runs while ``flaxlegacy.nn`` is still being imported).
  """
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from jax import lax  # pylint: disable=g-import-not-at-top
  if mean is None:
    mean = jnp.mean(x, axis, keepdims=True)
  if variance is None:
    variance = jnp.mean(jnp.square(x), axis, keepdims=True) - jnp.square(mean)
  return (x - mean) * lax.rsqrt(variance + epsilon)


def _host_ids():
  import jax  # pylint: disable=g-import-not-at-top
  return list(range(jax.process_count()))


def _noop(*args, **kwargs):  # pylint: disable=unused-argument
  """Legacy ``jax.config.enable_omnistaging()``: omnistaging is always on."""
  return None


def _check_eq(xs, ys, err_msg=''):
  """Legacy ``jax.test_util.check_eq``: same tree, leaves allclose."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  assert jax.tree_util.tree_structure(xs) == jax.tree_util.tree_structure(ys), (
      f'tree structures differ: {jax.tree_util.tree_structure(xs)} vs '
      f'{jax.tree_util.tree_structure(ys)}')
  for x, y in zip(jax.tree_util.tree_leaves(xs), jax.tree_util.tree_leaves(ys)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), err_msg=err_msg)


SPECIAL = {
    'index_update': _index_op('set'),
    'index_add': _index_op('add'),
    'index_mul': _index_op('multiply'),
    'index_min': _index_op('min'),
    'index_max': _index_op('max'),
    'shuffle': _shuffle,
    'normalize': _normalize,
    'tie_in': _tie_in,
    'host_ids': _host_ids,
    'noop': _noop,
    'true': True,
    'check_eq': _check_eq,
}


_resolve = _fallback._resolve  # pylint: disable=protected-access


def _has(owner, name):
  if _fallback.answers(owner, name):
    return False  # answered by the first-access fallback, not defined
  import warnings  # pylint: disable=g-import-not-at-top
  try:
    with warnings.catch_warnings():
      # numpy's __getattr__ warns (FutureWarning) before raising for np.str.
      warnings.simplefilter('ignore')
      getattr(owner, name)
  except AttributeError:
    return False
  except Exception:  # pylint: disable=broad-except
    # A deprecation shim that raises something else still means "exists".
    return True
  return True


def alias_value(alias):
  """The legacy value of one ``_names.JAX_ALIASES`` entry."""
  return _fallback.value_of(alias.value)


_value_of = _fallback.value_of


# Replacements whose module is costly to import (jax_test_util imports
# absl.testing, ~60 ms): resolved on first access through a module
# ``__getattr__`` on the owner instead of at activation.
_LAZY_VALUE_MODULES = ('flaxlegacy.compat.jax_test_util',)


def _install_lazy(owner, lazy):
  """Gives module ``owner`` a ``__getattr__`` for the names in ``lazy``.

  Chains to the module's own ``__getattr__`` if it has one; a resolved name
  becomes a plain attribute.
  """
  namespace = owner.__dict__
  previous = namespace.get('__getattr__')

  def __getattr__(name):  # pylint: disable=invalid-name
    spec = lazy.get(name)
    if spec is not None:
      value = _value_of(spec)
      setattr(owner, name, value)
      return value
    if previous is not None:
      return previous(name)
    raise AttributeError(
        f'module {owner.__name__!r} has no attribute {name!r}')

  __getattr__.flaxlegacy_lazy = lazy
  namespace['__getattr__'] = __getattr__


def install_jax_aliases(aliases=None):
  """Adds each name of ``_names.ALIASES`` (or ``aliases``) where it is absent.

  ``ALIASES`` holds the removed JAX names (``JAX_ALIASES``,
  ``JAX_REMOVED_API``), flax private names, NumPy names and Python names.
  Returns the aliases that were added.  Nothing that exists is replaced.
  An owner whose package is not imported yet is not imported for this (a
  JAX program need not import flax): its names are added once it is.
  """
  added = []
  lazy = {}
  deferred = {}
  for alias in _names.ALIASES if aliases is None else aliases:
    package = alias.owner.partition('.')[0]
    if package not in sys.modules:
      deferred.setdefault(package, []).append(alias)
      continue
    try:
      owner = _resolve(alias.owner)
    except (ImportError, AttributeError):
      continue
    if _has(owner, alias.name):
      continue
    if (alias.value.partition(':')[0] in _LAZY_VALUE_MODULES and
        isinstance(owner, types.ModuleType)):
      lazy.setdefault(owner, {})[alias.name] = alias.value
      added.append(alias)
      continue
    try:
      value = _value_of(alias.value)
    except (ImportError, AttributeError):
      logger.debug('flaxlegacy: no replacement for %s.%s', alias.owner,
                   alias.name)
      continue
    setattr(owner, alias.name, value)
    added.append(alias)
  for owner, names in lazy.items():
    _install_lazy(owner, names)
  for package, pending in deferred.items():
    _hook.after_import(
        package, lambda module, pending=tuple(pending): install_jax_aliases(
            pending))
  return tuple(added)


# --- policies -------------------------------------------------------------


def policy_enabled(policy):
  """Whether a legacy policy applies, from its env var (default: on)."""
  value = os.environ.get(policy.env, '').strip().lower()
  if value in _OFF:
    return False
  if value in _ON or not value:
    return True
  raise ValueError(
      f'{policy.env}={os.environ[policy.env]!r}: expected "legacy" or '
      f'"modern" ({policy.doc}).')


def _user_set(setting):
  """True if the user set the underlying option in the environment."""
  return setting.upper() in os.environ


def _apply_policy(policy):
  if not policy_enabled(policy) or _user_set(policy.setting):
    return None
  if policy.setting.startswith('jax_'):
    import jax  # pylint: disable=g-import-not-at-top
    config = jax.config
  elif 'flax' not in sys.modules:
    # Not yet imported (activation at `import jax`, FLAXLEGACY=on): set it
    # as soon as flax is, without importing flax here.
    _hook.after_import('flax', lambda module: _set(module.config, policy))
    return False
  else:
    import flax  # pylint: disable=g-import-not-at-top
    config = flax.config
  return _set(config, policy)


def _set(config, policy):
  previous = getattr(config, policy.setting, None)
  config.update(policy.setting, policy.legacy_value)
  return previous


def _quiet_legacy_checkpoints():
  # flax 0.12.8 warns on every msgpack save that its own checkpointing will
  # be deprecated; for legacy code that format is the point (legacy never
  # warned).  Only this warning, only from that module.
  import warnings  # pylint: disable=g-import-not-at-top
  warnings.filterwarnings(
      'ignore', message='Flax Checkpointing will soon be deprecated',
      category=DeprecationWarning, module=r'flax\.training\.checkpoints')


def apply_policies():
  applied = {}
  for policy in _names.POLICIES:
    try:
      previous = _apply_policy(policy)
    except AttributeError:  # the setting no longer exists
      continue
    if previous is not None or policy_enabled(policy):
      if not _user_set(policy.setting) and policy_enabled(policy):
        applied[policy.name] = previous
  if 'checkpoints' in applied:
    _quiet_legacy_checkpoints()
  restored = []
  for behaviour in _names.BEHAVIOURS:
    if policy_enabled(behaviour) and _behaviour.restore(behaviour.name):
      applied[behaviour.name] = None
      restored.append(behaviour)
  if applied:
    settings = [f'{p.setting}={p.legacy_value}' for p in _names.POLICIES
                if p.name in applied]
    if restored:
      settings.append('JAX behaviour: ' +
                      ', '.join(b.name for b in restored))
    logger.warning(
        'flaxlegacy: legacy mode on for %s (%s). Set %s to "modern" to keep '
        "today's defaults.",
        ', '.join(applied), '; '.join(settings),
        ' / '.join(p.env for p in _names.POLICIES + _names.BEHAVIOURS
                   if p.name in applied))
  return applied


def _serve_jax_config_module(jax_module):  # pylint: disable=unused-argument
  # A removed module path that must exist in sys.modules without going
  # through the import system (see _hook._serve_jax_config).
  if 'jax.config' not in sys.modules:
    sys.modules['jax.config'] = _hook._serve_jax_config()  # pylint: disable=protected-access


def activate():
  """Makes the legacy API available in this process (idempotent).

  A call made while activation is under way (an import it triggers that
  leads back here) returns at once.  If activation raises, the process is
  left not active, so the next legacy import tries again.
  """
  with _lock:
    if _state['active'] or _state['activating']:
      return
    _state['activating'] = True
    try:
      _hook.install()
      _state['aliases'] = install_jax_aliases()
      _hook.after_import('jax', _serve_jax_config_module)
      _state['policies'] = apply_policies()
      _install_dataset_hook()
      _state['active'] = True
    finally:
      _state['activating'] = False


def _install_dataset_hook():
  """Offline tfds.load('mnist') for legacy programs (flaxlegacy.datasets).

  Cheap: it only waits for ``tensorflow_datasets`` to be imported.  It must
  never break activation, hence the broad except.
  """
  try:
    from flaxlegacy.datasets import tfds_hook  # pylint: disable=g-import-not-at-top
    tfds_hook.install()
  except Exception:  # pylint: disable=broad-except
    logger.debug('flaxlegacy: dataset hook not installed', exc_info=True)


def is_active():
  return _state['active']
