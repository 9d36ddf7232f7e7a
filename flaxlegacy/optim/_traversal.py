"""Legacy ``ModelParamTraversal``: selects parameters by their path.

flax 0.12.8 still has ``flax.traverse_util.ModelParamTraversal`` with the
0.3.1+ algorithm for dicts and FrozenDicts, but it no longer knows the
legacy ``nn.Model``.  This subclass adds the Model case (unwrap ``params``,
re-wrap with ``replace``), which is the only legacy behaviour missing
(Decision D6: Model, dict and FrozenDict are all accepted).
"""

from flax import core
from flax import traverse_util


def _model_class():
  """``flaxlegacy.nn.base.Model``, imported lazily (the nn layer imports
  optim-free code only, but may not be importable in every checkout)."""
  try:
    from flaxlegacy.nn import base  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  return getattr(base, 'Model', None)


def is_model(x):
  """True for a legacy ``nn.Model`` (a struct with ``module`` and ``params``)."""
  cls = _model_class()
  if cls is not None:
    return isinstance(x, cls)
  return (type(x).__name__ == 'Model' and hasattr(x, 'module') and
          hasattr(x, 'params') and hasattr(x, 'replace'))


def _sorted_items(x):
  """The items of a dict ordered by key."""
  return sorted(x.items(), key=lambda kv: kv[0])


def _params_dict(inputs):
  if is_model(inputs):
    return inputs.params
  if isinstance(inputs, (dict, core.FrozenDict)):
    return core.unfreeze(inputs)
  raise ValueError('Can only traverse a flax Model instance or a nested '
                   f'dict, not {type(inputs)}')


class ModelParamTraversal(traverse_util.ModelParamTraversal):
  """Selects the parameters whose path ``'/a/b/kernel'`` passes
  ``filter_fn(path, value)``, in an ``nn.Model``, a dict or a FrozenDict."""

  def __new__(cls, *args, **kwargs):
    # flax 0.12.8 warns on every Traversal; legacy flax.optim did not.
    del args, kwargs
    return object.__new__(cls)

  def __init__(self, filter_fn):  # pylint: disable=super-init-not-called
    self._filter_fn = filter_fn

  def iterate(self, inputs):
    flat = traverse_util.flatten_dict(_params_dict(inputs))
    for key, value in _sorted_items(flat):
      if self._filter_fn('/' + '/'.join(key), value):
        yield value

  def update(self, fn, inputs):
    flat = traverse_util.flatten_dict(_params_dict(inputs),
                                      keep_empty_nodes=True)
    new = {}
    for key, value in _sorted_items(flat):
      # empty_node stands for an empty sub-dict (kept since 0.3.0).
      if value is not traverse_util.empty_node:
        if self._filter_fn('/' + '/'.join(key), value):
          value = fn(value)
      new[key] = value
    new_params = traverse_util.unflatten_dict(new)
    if is_model(inputs):
      return inputs.replace(params=new_params)
    if isinstance(inputs, core.FrozenDict):
      return core.FrozenDict(new_params)
    return new_params


def as_legacy_traversal(traversal):
  """flax's own ModelParamTraversal (what v0.3.5+ code builds through
  ``flax.traverse_util``) re-made as ours, so it also walks an nn.Model."""
  if (type(traversal) is traverse_util.ModelParamTraversal):  # pylint: disable=unidiomatic-typecheck
    return ModelParamTraversal(traversal._filter_fn)  # pylint: disable=protected-access
  return traversal
