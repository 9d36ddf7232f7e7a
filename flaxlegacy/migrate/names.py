"""Legacy names -> linen names, for parameters and module state.

Two differences between a legacy model and its linen port change the
*names* in a parameter tree (the arrays are the same):

* Auto-naming.  Legacy numbered the unnamed submodules of a module with one
  counter for all classes, in call order (``Conv_0, Conv_1, Dense_2,
  Dense_3``); linen keeps one counter per class (``Conv_0, Conv_1, Dense_0,
  Dense_1``).  ``linen_params`` renumbers, with flax's own
  ``convert_pre_linen`` (sorted naturally, then per-class counters).  It
  renames every key of the form ``<name>_<digits>``, so a submodule the
  legacy code named ``block_3`` explicitly is renumbered too: give the linen
  submodule the converted name, or skip the renaming for such trees.
* Module state.  Legacy kept state in an ``nn.Collection`` keyed by module
  path (``'/block0/bn1' -> {'mean', 'var'}``); linen keeps it in a
  collection nested like the params (``batch_stats['block0']['bn1'] ->
  {'mean', 'var'}``).  Legacy ``BatchNorm`` stores ``mean`` and ``var``,
  the same names as linen's ``BatchNorm``.

Parameter names inside each layer are the same in legacy and linen for the
layers that exist in both (``kernel``, ``bias``, ``scale``, ``embedding``).
"""

from flax import core
from flax.training import checkpoints as flax_checkpoints

from flaxlegacy import nn


def _plain(tree):
  return core.unfreeze(tree) if isinstance(tree, core.FrozenDict) else tree


def linen_params(tree):
  """Renames legacy auto-named submodules to linen's numbering.

  Works on any tree nested like the params (the params themselves, per-
  parameter optimizer states, batch statistics); non-dict leaves are kept.
  """
  return _plain(flax_checkpoints.convert_pre_linen(tree))


def _path_parts(path):
  return tuple(p for p in path.split('/') if p)


def batch_stats_from_collection(collection, linen_names=False):
  """A legacy ``nn.Collection`` (or its ``as_dict()``) as a nested tree.

  ``{'/block0/bn1': {'mean': m, 'var': v}}`` becomes
  ``{'block0': {'bn1': {'mean': m, 'var': v}}}``; the state of the root
  module (path ``'/'``) is merged at the top.  With ``linen_names`` the
  module names are renumbered as ``linen_params`` does.
  """
  flat = collection.as_dict() if isinstance(collection,
                                             nn.Collection) else collection
  tree = {}
  for path, value in sorted(flat.items()):
    node = tree
    for part in _path_parts(path):
      node = node.setdefault(part, {})
    if not isinstance(value, dict):
      raise ValueError(
          f'batch_stats_from_collection: the state at module path {path!r} '
          f'is a {type(value).__name__}, not a dict of named variables')
    for name, leaf in value.items():
      if name in node:
        raise ValueError(
            f'batch_stats_from_collection: {name!r} at module path {path!r} '
            'is both a state variable and a submodule')
      node[name] = leaf
  return linen_params(tree) if linen_names else tree


def collection_from_batch_stats(batch_stats):
  """The inverse of ``batch_stats_from_collection`` (legacy names).

  A module's state is a dict whose values are all leaves (arrays); its path
  is the chain of keys leading to it.
  """
  flat = {}

  def walk(node, parts):
    node = _plain(node)
    leaves = {k: v for k, v in node.items() if not isinstance(v, dict)}
    if leaves:
      flat['/' + '/'.join(parts)] = leaves
    for key, value in node.items():
      if isinstance(value, dict):
        walk(value, parts + (key,))

  walk(batch_stats, ())
  return nn.Collection(flat)
