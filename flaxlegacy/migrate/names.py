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

``rename_params(tree, rename_map, root_class)`` renames with the exact map
``flaxlegacy upgrade --names linen`` writes to ``upgrade.json`` (legacy
name -> linen name of every child of every upgraded class) instead: names
the code wrote (``block_3``) stay as they are, and a tree that does not fit
the module raises.  It imports plain flax only (no legacy API), so upgraded
code can call it with ``FLAXLEGACY=off``; the Collection helpers import the
legacy ``nn`` when called.
"""

import collections.abc
import json
import os
import re

from flax import core


def _plain(tree):
  return core.unfreeze(tree) if isinstance(tree, core.FrozenDict) else tree


def linen_params(tree):
  """Renames legacy auto-named submodules to linen's numbering.

  Works on any tree nested like the params (the params themselves, per-
  parameter optimizer states, batch statistics); non-dict leaves are kept.
  """
  from flax.training import checkpoints as flax_checkpoints  # pylint: disable=g-import-not-at-top
  return _plain(flax_checkpoints.convert_pre_linen(tree))


def load_rename_map(rename_map):
  """The ``rename_map`` of ``flaxlegacy upgrade --names linen``.

  ``rename_map``: the path of ``upgrade.json`` (or of its directory), the
  report dict, or its ``rename_map`` dict itself.
  """
  if isinstance(rename_map, (str, os.PathLike)):
    path = os.fspath(rename_map)
    if os.path.isdir(path):
      path = os.path.join(path, 'upgrade.json')
    with open(path, encoding='utf-8') as fh:
      rename_map = json.load(fh)
    if 'rename_map' not in rename_map:
      raise ValueError(
          f'{path} has no rename_map: it was written by flaxlegacy upgrade '
          'without --names linen (its modules keep the legacy names)')
  if not isinstance(rename_map, collections.abc.Mapping):
    raise ValueError(f'rename map: expected upgrade.json or its rename_map, '
                     f'got a {type(rename_map).__name__}')
  if 'rename_map' in rename_map:  # the report (class keys have a ':')
    rename_map = rename_map['rename_map']
  elif 'modules' in rename_map and 'version' in rename_map:
    raise ValueError('the upgrade report has no rename_map: it was made '
                     'without --names linen')
  return rename_map


def _class_key(rename_map, root_class):
  if root_class in rename_map:
    return root_class
  found = sorted(k for k in rename_map if k.rsplit(':', 1)[-1] == root_class)
  if len(found) == 1:
    return found[0]
  if found:
    raise ValueError(f'rename map: class {root_class!r} is defined in several '
                     f'files; name one of {found}')
  raise ValueError(f'rename map: no upgraded class {root_class!r}; the map '
                   f'has {sorted(rename_map)}')


def _pattern(entry, key):
  for p in entry.get('name_patterns', ()):
    if re.fullmatch(p['regex'], key):
      return p
  return None


def _named(rename_map, name):
  return [k for k in rename_map if k.rsplit(':', 1)[-1] == name]


_AUTO = re.compile(r'^(?:(.*)_)?(\d+)$')


def rename_params(tree, rename_map, root_class):
  """Renames a legacy tree to the names of a ``--names linen`` upgrade.

  Args:
    tree: params, batch statistics or any tree nested like the params of
      ``root_class`` (non-dict leaves, such as per-parameter optimizer
      states, are kept); a FrozenDict gives a FrozenDict.
    rename_map: ``DST/upgrade.json`` of ``flaxlegacy upgrade --names linen``
      (a path, its directory, the report dict or its ``rename_map``).
    root_class: the upgraded module class the tree belongs to: ``'Net'``,
      or ``'models.py:Net'`` where several files define a ``Net``.

  Returns:
    The tree with every submodule name the upgrade changed renamed, down
    the tree; explicit names (``block_3``) and variable names unchanged.

  Raises:
    ValueError: naming the key and the class, where the tree does not fit
      the map (a key that is neither a child nor a variable of a class
      whose names the map knows all of; a submodule that is a leaf; two
      keys renamed to one).
  """
  rename_map = load_rename_map(rename_map)
  key = _class_key(rename_map, root_class)
  frozen = isinstance(tree, core.FrozenDict)
  out = _rename(_plain(tree), rename_map, key, ())
  return core.freeze(out) if frozen else out


def _rename(node, rename_map, cls, path):
  where = '/'.join(path) or '<root>'
  if cls not in rename_map:
    raise ValueError(f'rename_params: {where}: class {cls} has no entry in '
                     'the rename map (not upgraded, or upgraded without '
                     '--names linen)')
  entry = rename_map[cls]
  seen = [cls]
  while 'inherits' in entry:  # a subclass that runs its base's __call__
    cls = entry['inherits']
    if cls in seen or cls not in rename_map:
      raise ValueError(f'rename_params: {where}: {seen[0]} inherits from '
                       f'{cls}, which has no usable entry in the rename map')
    seen.append(cls)
    entry = rename_map[cls]
  if not isinstance(node, collections.abc.Mapping):
    raise ValueError(f'rename_params: {where}: expected the submodules and '
                     f'variables of {cls} (a dict), got a '
                     f'{type(node).__name__}')
  children = entry.get('children', {})
  patterns = entry.get('patterns', {})
  variables = set(entry.get('variables', ()))
  out, source = {}, {}
  for key, value in _plain(node).items():
    child = children.get(key)
    match = _AUTO.match(key) if child is None else None
    if child is not None:
      new, child_cls = child['name'], child['class']
    elif _pattern(entry, key) is not None:
      # a name the code wrote as an f-string (f'block_{i}'): kept
      new, child_cls = key, _pattern(entry, key)['class']
    elif match and (match.group(1) or '') in patterns:
      new, child_cls = key, patterns[match.group(1) or '']
    elif match and match.group(1) and entry.get('runtime_classes') and len(
        _named(rename_map, match.group(1))) == 1:
      # legacy '<class name>_<n>' of a class chosen at run time
      new, child_cls = key, _named(rename_map, match.group(1))[0]
    elif key in variables or not entry.get('complete', True):
      new, child_cls = key, None
    else:
      raise ValueError(
          f'rename_params: {"/".join(path + (key,))!r} does not fit the '
          f'rename map: {key!r} is neither a submodule nor a variable of '
          f'{cls} (submodules: {sorted(children)}; variables: '
          f'{sorted(variables)})')
    if child_cls is not None:
      value = _rename(value, rename_map, child_cls, path + (key,))
    if new in out:
      raise ValueError(f'rename_params: {where}: {source[new]!r} and {key!r} '
                       f'of {cls} would both be renamed {new!r}')
    out[new], source[new] = value, key
  return out


def _path_parts(path):
  return tuple(p for p in path.split('/') if p)


def batch_stats_from_collection(collection, linen_names=False):
  """A legacy ``nn.Collection`` (or its ``as_dict()``) as a nested tree.

  ``{'/block0/bn1': {'mean': m, 'var': v}}`` becomes
  ``{'block0': {'bn1': {'mean': m, 'var': v}}}``; the state of the root
  module (path ``'/'``) is merged at the top.  With ``linen_names`` the
  module names are renumbered as ``linen_params`` does.
  """
  from flaxlegacy import nn  # pylint: disable=g-import-not-at-top
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
  from flaxlegacy import nn  # pylint: disable=g-import-not-at-top
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
