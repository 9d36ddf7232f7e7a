"""Corpus-only shim for the ORACLE side (legacy Flax on jax 0.4.13), put into
the oracle layers only by setup_envs.sh.

The oracle stands for the 2021 environment, but its JAX is 0.4.13 (the
oldest with Python 3.11 wheels). A few 2021 codebases import JAX modules
that existed in 2021 and were removed before 0.4.13; without them the oracle
cannot even collect their tests. Like the oracle's own sitecustomize aliases
(../shared/conformance/oracle), this gives back exactly those modules, each
as the object it was in 2021, and nothing else:

* `jax.interpreters.sharded_jit` (removed in jax 0.4.0): flaxformer's
  activation_partitioning uses only its `PartitionSpec`, the class that
  moved to `jax.sharding.PartitionSpec`.

The flaxlegacy side does NOT get this shim: restoring removed JAX names there
is flaxlegacy's own job, and a test that needs one fails there until
flaxlegacy does it.
"""
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

_MISSING = {'jax.interpreters.sharded_jit'}


class _Loader(importlib.abc.Loader):

  def create_module(self, spec):
    return types.ModuleType(spec.name)

  def exec_module(self, module):
    from jax.sharding import PartitionSpec  # pylint: disable=g-import-not-at-top
    module.PartitionSpec = PartitionSpec
    module.__doc__ = 'corpus oracle shim: the 2021 module, PartitionSpec only'


class _Finder(importlib.abc.MetaPathFinder):

  def find_spec(self, name, path=None, target=None):
    if name not in _MISSING:
      return None
    if importlib.machinery.PathFinder.find_spec(name, path) is not None:
      return None   # this JAX still has it: nothing to do
    return importlib.util.spec_from_loader(name, _Loader())


sys.meta_path.append(_Finder())
