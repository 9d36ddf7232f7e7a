"""Legacy ``MultiOptimizer``: one optimizer per traversal-selected subset.

Legacy had two state layouts (spec §4.3), both visible to tests and
checkpoints:

* ``'list'`` (v0.1.0rc2 - v0.3.2): the state is a Python list with one
  ``OptimizerState`` per (traversal, optimizer) pair, whose ``param_states``
  is a list in traversal order and whose ``step`` is that pair's own count;
* ``'tree'`` (v0.3.3+): one ``OptimizerState`` whose ``param_states``
  mirrors the target, ``None`` at leaves no traversal selects; overlapping
  traversals are rejected.

Decision D7 (flaxlegacy): ``'tree'`` is the default - it is what the last
legacy releases (v0.3.3 - v0.5.3) wrote and what the reference traces of
flax 0.3.5 record; ``'list'`` is chosen per instance
(``MultiOptimizer(..., layout='list')``), per process
(``set_multi_optimizer_layout('list')``) or by the environment
(``FLAXLEGACY_MULTI_OPTIMIZER_LAYOUT=list``).  ``restore_state`` accepts
either layout whatever the instance uses.
"""

import dataclasses
import os
from typing import Any, List

from flax import serialization
import jax
import jax.numpy as jnp
import numpy as np

from flaxlegacy.optim import _traversal
from flaxlegacy.optim.base import _initial_step
from flaxlegacy.optim.base import _replace_hyper_params
from flaxlegacy.optim.base import OptimizerDef
from flaxlegacy.optim.base import OptimizerState

LAYOUTS = ('tree', 'list')
_ENV = 'FLAXLEGACY_MULTI_OPTIMIZER_LAYOUT'
_default_layout = [None]  # None: read the environment on first use


def _check_layout(layout):
  if layout not in LAYOUTS:
    raise ValueError(f'MultiOptimizer layout must be one of {LAYOUTS}, '
                     f'got {layout!r}')
  return layout


def default_layout():
  if _default_layout[0] is None:
    _default_layout[0] = _check_layout(
        os.environ.get(_ENV, 'tree').strip().lower() or 'tree')
  return _default_layout[0]


def set_multi_optimizer_layout(layout):
  """Sets the state layout of MultiOptimizers built from now on ('tree' as
  in v0.3.3+, or 'list' as in v0.1.0rc2 - v0.3.2); returns the previous."""
  previous = default_layout()
  _default_layout[0] = _check_layout(layout)
  return previous


@dataclasses.dataclass
class _ShapeDtype:
  """A leaf seen by traversal filters in ``init_state`` (tree layout)."""
  shape: Any
  dtype: Any
  _value: Any
  _indices: List[int]

  @classmethod
  def create(cls, value):
    # Old JAX counted NumPy arrays as jnp.ndarray (jax-drift §3).
    if not isinstance(value, (jax.Array, np.ndarray)):
      value = jnp.array(value)
    return cls(shape=value.shape, dtype=value.dtype, _value=value,
               _indices=[])


def _is_record(x):
  return isinstance(x, _ShapeDtype)


def _records_to_none(tree):
  return jax.tree_util.tree_map(lambda x: None if _is_record(x) else x, tree)


class MultiOptimizer(OptimizerDef):
  """Applies each optimizer to the parameters its traversal selects."""

  def __init__(self, *traversals_and_optimizers, layout=None):
    traversals, sub_optimizers = zip(*traversals_and_optimizers)
    super().__init__([opt.hyper_params for opt in sub_optimizers])
    self.traversals = tuple(_traversal.as_legacy_traversal(t)
                            for t in traversals)
    self.sub_optimizers = tuple(sub_optimizers)
    self.layout = _check_layout(layout or default_layout())

  # -- hyper-parameters ----------------------------------------------------

  def update_hyper_params(self, **hyper_param_overrides):
    """``hyper_params=[...]`` replaces the list; other keywords apply to
    every sub-optimizer."""
    hps = hyper_param_overrides.pop('hyper_params', self.hyper_params)
    if hyper_param_overrides:
      hps = [_replace_hyper_params(opt, hp, hyper_param_overrides)
             for opt, hp in zip(self.sub_optimizers, hps)]
    return hps

  # -- state ---------------------------------------------------------------

  def init_state(self, params):
    if self.layout == 'list':
      return [opt.init_state(list(t.iterate(params)))
              for t, opt in zip(self.traversals, self.sub_optimizers)]
    records = jax.tree_util.tree_map(_ShapeDtype.create, params)
    overlap = False
    for idx, t in enumerate(self.traversals):
      for match in t.iterate(records):
        match._indices.append(idx)  # pylint: disable=protected-access
        overlap |= len(match._indices) > 1  # pylint: disable=protected-access
    if overlap:
      raise ValueError(
          'Multiple optimizers match the same leaves : ' + str(
              jax.tree_util.tree_map(lambda r: r._indices, records)))  # pylint: disable=protected-access
    param_states = records
    for t, opt in zip(self.traversals, self.sub_optimizers):
      param_states = t.update(
          lambda r, opt=opt: opt.init_param_state(r._value), param_states)  # pylint: disable=protected-access
    return OptimizerState(_initial_step(), _records_to_none(param_states))

  def apply_gradient(self, hyper_params, params, state, grads):
    if isinstance(state, list):
      return self._apply_list(hyper_params, params, state, grads)
    return self._apply_tree(hyper_params, params, state, grads)

  def _apply_list(self, hyper_params, params, states, grads):
    new_params = params
    new_states = []
    for focus, opt, hp, s in zip(self.traversals, self.sub_optimizers,
                                 hyper_params, states):
      p = list(focus.iterate(params))
      g = list(focus.iterate(grads))
      new_p, new_s = opt.apply_gradient(hp, p, s, g)
      new_params = focus.set(list(new_p), new_params)
      new_states.append(new_s)
    return new_params, new_states

  def _apply_tree(self, hyper_params, params, state, grads):
    new_params = params
    new_param_states = jax.tree_util.tree_map(_ShapeDtype.create, params)
    for focus, opt, hp in zip(self.traversals, self.sub_optimizers,
                              hyper_params):
      ps = tuple(focus.iterate(params))
      gs = tuple(focus.iterate(grads))
      ss = tuple(focus.iterate(state.param_states))
      # v0.3.4+: the sub-optimizer's own apply_gradient, so wrapped
      # definitions (WeightNorm) work as sub-optimizers.
      new_ps, new_ss = opt.apply_gradient(hp, ps, OptimizerState(state.step,
                                                                 ss), gs)
      new_params = focus.set(list(new_ps), new_params)
      new_param_states = focus.set(list(new_ss.param_states),
                                   new_param_states)
    return new_params, OptimizerState(state.step + 1,
                                      _records_to_none(new_param_states))

  # -- layouts and restore -------------------------------------------------

  def _tree_to_list(self, state):
    return [OptimizerState(state.step, list(t.iterate(state.param_states)))
            for t in self.traversals]

  def _list_to_tree(self, states, template):
    """List-layout states placed into the tree-layout ``template``."""
    param_states = template.param_states
    for t, s in zip(self.traversals, states):
      param_states = t.set(list(s.param_states), param_states)
    return OptimizerState(states[0].step if states else template.step,
                          param_states)

  def restore_state(self, opt_target, opt_state, state_dict):
    """Restores from a state dict of either layout into this one's."""
    target = serialization.from_state_dict(opt_target, state_dict['target'])
    sd = state_dict['state']
    sd_is_tree = isinstance(sd, dict) and 'param_states' in sd
    if isinstance(opt_state, list):
      if sd_is_tree:
        tree = self._list_to_tree(opt_state, OptimizerState(
            opt_state[0].step if opt_state else _initial_step(),
            self._tree_template(target)))
        tree = serialization.from_state_dict(tree, sd)
        return target, self._tree_to_list(tree)
      return target, serialization.from_state_dict(opt_state, sd)
    if not sd_is_tree:
      as_list = serialization.from_state_dict(self._tree_to_list(opt_state),
                                              sd)
      return target, self._list_to_tree(as_list, opt_state)
    return target, serialization.from_state_dict(opt_state, sd)

  def _tree_template(self, target):
    """A tree-layout param_states shaped like ``target`` (None where no
    traversal selects), used to read tree-layout state into a list one."""
    records = jax.tree_util.tree_map(lambda _: None, target)
    return records
