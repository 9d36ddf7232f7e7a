"""Stand-in for gift/data/dataset_utils.py (ours, for the drivers).

The real module builds tf.data pipelines (TensorFlow, tensorflow_addons,
tensorflow_datasets); the models only read ``DATA_TYPE``, kept as it is.
"""
import collections

import jax.numpy as jnp
import tensorflow as tf

Dtype = collections.namedtuple('dtype', ['tf_dtype', 'jax_dtype'])
DATA_TYPE = {
    'float16': Dtype(tf.float16, jnp.float16),
    'float32': Dtype(tf.float32, jnp.float32),
    'int32': Dtype(tf.int32, jnp.int32),
}
