"""Adapters between the two module systems, one each way.

* ``LegacyModule(module)``: a legacy ``flax.nn`` module (class or
  ``.partial``) used as a linen ``Module``.  Its legacy parameter tree is this
  linen module's ``params`` (same names, same arrays), its ``nn.Collection``
  state lives in a linen collection (``batch_stats`` by default) nested by
  module path, and ``nn.stochastic`` keys come from a linen RNG stream
  (``dropout`` by default).  A model can so be ported to linen from the
  outside in, keeping trained legacy sub-models as they are.
* ``LinenModule``: a linen ``Module`` used inside a legacy module,
  ``LinenModule(x, module=linen_module)``.  Its legacy params entry holds the
  linen ``params`` (``{'params': linen_variables['params']}``), its state (if
  the linen module has ``batch_stats``-like collections and an
  ``nn.stateful`` context is open) is the legacy state variable of the same
  name, and linen RNG streams are fed from ``nn.stochastic``.  A model can so
  be ported from the inside out.

The outputs are those of the wrapped module: the adapters move variables,
they compute nothing.
"""

from typing import Any, Sequence

from flax import core
from flax import linen

from flaxlegacy import nn
from flaxlegacy.migrate import names


def _plain(tree):
  return core.unfreeze(tree) if isinstance(tree, core.FrozenDict) else tree


class LegacyModule(linen.Module):
  """A legacy ``flax.nn`` module as a linen ``Module``.

  Attributes:
    module: the legacy module class, with its hyper-parameters bound by
      ``.partial(...)`` (e.g. ``CNN.partial(num_classes=10)``).
    state_collection: the linen collection holding the legacy module's
      ``nn.Collection`` state (BatchNorm statistics ...).  Apply with
      ``mutable=[state_collection]`` where the legacy code ran
      ``nn.stateful(state)`` (training), without it where it ran
      ``nn.stateful(state, mutable=False)`` (evaluation).
    rng_collection: the linen RNG stream that seeds ``nn.stochastic`` (for
      ``nn.dropout`` / ``nn.make_rng``) when the caller provides it.
  """

  module: Any
  state_collection: str = 'batch_stats'
  rng_collection: str = 'dropout'

  @linen.compact
  def __call__(self, *args, **kwargs):
    if self.is_initializing():
      return self._init(*args, **kwargs)
    params = _plain(self.variables.get('params', {}))
    stored = self.variables.get(self.state_collection)
    mutable = self.is_mutable_collection(self.state_collection)
    if stored is None and not mutable:
      # No state and none wanted: the legacy module runs stateless (legacy
      # BatchNorm then uses batch statistics and stores nothing).
      return self._stochastic(self.module.call, params, *args, **kwargs)
    collection = names.collection_from_batch_stats(stored or {})
    with nn.stateful(collection, mutable=mutable) as new_state:
      y = self._stochastic(self.module.call, params, *args, **kwargs)
    if mutable:
      self._store_state(new_state)
    return y

  def _init(self, *args, **kwargs):
    rng = self.make_rng('params')
    with nn.stateful() as state:
      y, params = self._stochastic(self.module.init, rng, *args, **kwargs)
    for name, value in params.items():
      self.param(name, lambda _, v=value: v)
    self._store_state(state)
    return y

  def _stochastic(self, fn, *args, **kwargs):
    if self.has_rng(self.rng_collection):
      with nn.stochastic(self.make_rng(self.rng_collection)):
        return fn(*args, **kwargs)
    return fn(*args, **kwargs)

  def _store_state(self, collection):
    tree = names.batch_stats_from_collection(collection)
    for name, value in tree.items():
      self.put_variable(self.state_collection, name, value)


def legacy_variables(params, state=None, state_collection='batch_stats'):
  """Linen variables of a ``LegacyModule`` from legacy params (and state).

  ``params`` may be an ``nn.Model``; ``state`` an ``nn.Collection``.  Place
  the result under the ``LegacyModule``'s name in the parent's variables, or
  apply a bare ``LegacyModule`` with it.
  """
  if isinstance(params, nn.Model):
    params = params.params
  variables = {'params': _plain(params)}
  if state is not None:
    variables[state_collection] = names.batch_stats_from_collection(state)
  return variables


class LinenModule(nn.Module):
  """A linen ``Module`` inside a legacy module.

  ``LinenModule(x, module=linen.Dense(3))`` (or ``LinenModule.partial(
  module=...)``) runs ``module`` on ``x``.  Its legacy params entry is
  ``{'params': <the linen params>}``; with an ``nn.stateful`` context, each
  linen collection named in ``state_collections`` that the module has is the
  legacy state variable of that name; ``nn.stochastic`` feeds each RNG
  stream of ``rng_collections``.
  """

  def apply(self, *args, module, method=None,
            state_collections: Sequence[str] = ('batch_stats',),
            rng_collections: Sequence[str] = ('dropout',), **kwargs):
    rngs = ({name: nn.make_rng() for name in rng_collections}
            if nn.is_stochastic() else {})
    if self.is_initializing():
      return self._init(module, method, state_collections, rngs, args, kwargs)
    variables = {'params': self.get_param('params')}
    handles = {}
    if self.is_stateful():
      for name in state_collections:
        handle = self.state(name)
        try:
          variables[name] = handle.value
        except ValueError:  # this module stored no such state
          continue
        handles[name] = handle
    mutable = [name for name in handles if _is_mutable(nn.get_state())]
    # (linen returns (y, updates) for any list, even an empty one.)
    out = module.apply(variables, *args, rngs=rngs, method=method,
                       mutable=mutable or False, **kwargs)
    if not mutable:
      return out
    y, updates = out
    for name in mutable:
      handles[name].value = _plain(updates[name])
    return y

  def _init(self, module, method, state_collections, rngs, args, kwargs):
    made = {}

    def init_params(key, unused_shape):
      variables, y = _init_with_output(module, {'params': key, **rngs},
                                       args, kwargs, method)
      made.update(_plain(variables), output=y)
      return _plain(variables.get('params', {}))

    self.param('params', None, init_params)
    if self.is_stateful():
      for name in state_collections:
        if name in made:
          self.state(name).value = made[name]
    return made['output']


def _init_with_output(module, rngs, args, kwargs, method):
  y, variables = module.init_with_output(rngs, *args, method=method, **kwargs)
  return variables, y


def _is_mutable(collection):
  # nn.stateful(state, mutable=False) yields a Collection that refuses
  # writes (evaluation); a linen module then runs without mutable state.
  return getattr(collection, '_mutable', True)


def linen_variables_in_legacy(variables, state_collections=('batch_stats',)):
  """Legacy params entry and state of a ``LinenModule`` from linen variables.

  Returns ``(params_entry, state)``: put ``params_entry`` under the
  ``LinenModule``'s name in the legacy params, and ``state`` (a dict
  ``collection -> tree``) under its module path in the ``nn.Collection``.
  """
  variables = _plain(variables)
  state = {name: variables[name] for name in state_collections
           if name in variables}
  return {'params': variables.get('params', {})}, state
