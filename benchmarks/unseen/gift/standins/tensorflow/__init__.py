"""Stand-in for the few TensorFlow names gift's flax code reaches (not TF).

gift imports TensorFlow for its data pipelines; the model and training code
the drivers run only needs the dtype names and ``tf.io.gfile.exists`` (flax
0.3.6's checkpoints module imports ``tensorflow.io.gfile`` too).
"""
from tensorflow import io

float16 = 'tf.float16'
float32 = 'tf.float32'
int32 = 'tf.int32'

import types as _types
errors = _types.SimpleNamespace(NotFoundError=FileNotFoundError)
