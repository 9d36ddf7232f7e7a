"""Corpus-only environment shim, installed into every corpus layer (both
sides alike, by setup_envs.sh): TensorFlow 2.16 removed `tf.estimator`, and
gin-config's `gin.tf` (imported by dopamine's replay buffer) subclasses
`tf.estimator.SessionRunHook` at import. Just before `gin.tf.utils` loads,
give `tensorflow` a minimal `estimator` namespace with that one base class if
it has none. Nothing else is touched; no flax or jax name is involved.
"""
import importlib.abc
import sys
import types


class _Finder(importlib.abc.MetaPathFinder):

  def find_spec(self, name, path=None, target=None):
    if name == 'gin.tf.utils':
      import tensorflow as tf  # pylint: disable=g-import-not-at-top
      if not hasattr(tf, 'estimator'):
        class SessionRunHook:  # the shape gin needs: a base class
          pass
        tf.estimator = types.SimpleNamespace(SessionRunHook=SessionRunHook)
    return None


sys.meta_path.insert(0, _Finder())
