"""Legacy ``Optimizer`` <-> ``flax.training.train_state.TrainState``.

``to_train_state(optimizer)`` is the first step out of ``flax.optim``: the
optimizer's target parameters become ``TrainState.params``, its definition
becomes ``TrainState.tx`` (``optimizer_def.as_optax()``: an optax
transformation with the legacy numerics) and its ``param_states`` become
``TrainState.opt_state`` (``optimizer_def.to_optax_state``).  One
``TrainState.apply_gradients`` step then gives the parameters one legacy
``Optimizer.apply_gradient`` step gives.  ``from_train_state`` goes back.

An ``nn.Model`` target contributes its ``params`` dict (the Model wrapper is a
legacy device: linen keeps the apply function beside the params), and its
``module.call`` becomes the default ``apply_fn``, so ``state.apply_fn(
state.params, x)`` still runs the legacy module.
"""

from typing import Any

from flax.training import train_state as flax_train_state
from flaxlegacy import nn
from flaxlegacy.migrate import names
from flaxlegacy.optim import base as optim_base


class TrainState(flax_train_state.TrainState):
  """``flax.training.train_state.TrainState`` plus ``batch_stats``.

  The layout of flax's own examples (imagenet) for models with BatchNorm:
  the legacy ``nn.Collection`` of a legacy ``TrainState`` lands here.
  """

  batch_stats: Any


def _definition(optimizer):
  opt_def = optimizer.optimizer_def
  if isinstance(opt_def, optim_base.ReplicatedOptimizer):
    raise ValueError(
        'to_train_state: the optimizer is replicated with '
        'Optimizer.replicate(); call optimizer.unreplicate() first (a '
        'TrainState is replicated with flax.jax_utils.replicate).')
  return opt_def


def _unwrap(tree):
  """The params dict of an ``nn.Model``; anything else as it is."""
  return tree.params if isinstance(tree, nn.Model) else tree


def to_train_state(optimizer, apply_fn=None, linen_names=False,
                   batch_stats=None, **hyper_param_overrides):
  """A ``TrainState`` equivalent to the legacy ``optimizer``.

  Args:
    optimizer: a legacy ``flax.optim.Optimizer`` (not replicated with
      ``Optimizer.replicate()``; a ``jax_utils.replicate``-d one is fine).
    apply_fn: the ``TrainState.apply_fn``; by default the legacy module's
      ``call`` when the target is an ``nn.Model`` (else None).
    linen_names: rename the legacy auto-named submodules (``Conv_0, Conv_1,
      Dense_2``) to linen's per-class numbering (``Conv_0, Conv_1,
      Dense_0``), in ``params`` and in the optimizer state alike, for a
      linen port of the model (``names.linen_params``).
    batch_stats: a legacy ``nn.Collection`` of module state (BatchNorm
      statistics); returns the ``TrainState`` subclass of this module with
      the Collection as a linen ``batch_stats`` tree.
    **hyper_param_overrides: fixed values for the transformation (e.g. the
      ``learning_rate`` legacy code passed to every ``apply_gradient``).

  Returns:
    A ``flax.training.train_state.TrainState`` (or this module's subclass
    with ``batch_stats``) whose ``step`` is the optimizer's step.
  """
  opt_def = _definition(optimizer)
  if linen_names and isinstance(opt_def, optim_base.MultiOptimizer):
    raise ValueError(
        'to_train_state(linen_names=True) does not support MultiOptimizer: '
        'its traversals select parameters by their legacy names; convert '
        'with linen_names=False and rename with names.linen_params after '
        'replacing the traversals with optax.multi_transform labels.')
  if (apply_fn is None and not linen_names and
      isinstance(optimizer.target, nn.Model)):
    apply_fn = optimizer.target.module.call
  params = _unwrap(optimizer.target)
  param_states = _unwrap(optimizer.state.param_states)
  if linen_names:
    params = names.linen_params(params)
    param_states = names.linen_params(param_states)
  legacy_state = optimizer.state.replace(param_states=param_states)
  tx = opt_def.as_optax(**hyper_param_overrides)
  opt_state = opt_def.to_optax_state(legacy_state, params)
  fields = dict(step=optimizer.state.step, apply_fn=apply_fn, params=params,
                tx=tx, opt_state=opt_state)
  if batch_stats is not None:
    stats = names.batch_stats_from_collection(batch_stats,
                                              linen_names=linen_names)
    return TrainState(batch_stats=stats, **fields)
  return flax_train_state.TrainState(**fields)


def from_train_state(state, optimizer_def, module=None):
  """The legacy ``Optimizer`` equivalent to ``state`` (``to_train_state``'s
  inverse for states it produced, with legacy names).

  Args:
    state: a ``TrainState`` whose ``opt_state`` is a state of
      ``optimizer_def.as_optax()`` (as ``to_train_state`` builds it).
    optimizer_def: the legacy optimizer definition.
    module: a legacy module class; when given the target (and the per-
      parameter states) are ``nn.Model``s of it, as ``create(model)`` makes.

  Returns:
    ``flax.optim.Optimizer(optimizer_def, state, target)``.
  """
  legacy_state = optimizer_def.from_optax_state(state.opt_state, state.params,
                                                step=state.step)
  target = state.params
  if module is not None:
    target = nn.Model(module, target)
    legacy_state = legacy_state.replace(
        param_states=nn.Model(module, legacy_state.param_states))
  return optim_base.Optimizer(optimizer_def, legacy_state, target)
