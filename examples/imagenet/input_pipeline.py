"""ImageNet input pipeline on TFDS ``imagenet2012`` (tf.data), and synthetic data.

Train: a random crop covering 8%-100% of the image with aspect ratio in
[3/4, 4/3], resized to ``image_size``, random horizontal flip.  Eval: the
central crop of ``image_size / (image_size + 32)`` of the shorter side,
resized.  Both normalised with the ImageNet channel means and deviations.
JPEG decoding is deferred (``tfds.decode.SkipDecoding``) so that only the
crop is decoded.
"""

import jax
import numpy as onp
import tensorflow.compat.v2 as tf
import tensorflow_datasets as tfds

DATASET = 'imagenet2012'
TRAIN_IMAGES = 1281167
EVAL_IMAGES = 50000
NUM_CLASSES = 1000
IMAGE_SIZE = 224
CROP_PADDING = 32
MEAN_RGB = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STDDEV_RGB = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def _resize(image, image_size):
  return tf.image.resize([image], [image_size, image_size],
                         method=tf.image.ResizeMethod.BICUBIC)[0]


def _center_crop_window(shape, image_size):
  side = tf.cast(
      image_size / (image_size + CROP_PADDING) *
      tf.cast(tf.minimum(shape[0], shape[1]), tf.float32), tf.int32)
  top = (shape[0] - side + 1) // 2
  left = (shape[1] - side + 1) // 2
  return tf.stack([top, left, side, side])


def decode_center_crop(image_bytes, image_size):
  shape = tf.image.extract_jpeg_shape(image_bytes)
  window = _center_crop_window(shape, image_size)
  image = tf.image.decode_and_crop_jpeg(image_bytes, window, channels=3)
  return _resize(image, image_size)


def decode_random_crop(image_bytes, image_size):
  """A random crop (Inception-style); falls back to the centre crop."""
  shape = tf.image.extract_jpeg_shape(image_bytes)
  begin, size, _ = tf.image.sample_distorted_bounding_box(
      shape,
      bounding_boxes=tf.constant([0.0, 0.0, 1.0, 1.0], tf.float32, [1, 1, 4]),
      min_object_covered=0.1,
      aspect_ratio_range=(3. / 4., 4. / 3.),
      area_range=(0.08, 1.0),
      max_attempts=10,
      use_image_if_no_bounding_boxes=True)
  window = tf.stack([begin[0], begin[1], size[0], size[1]])
  # No acceptable box found within max_attempts: the whole image came back.
  whole = tf.reduce_all(tf.equal(size[:2], shape[:2]))
  return tf.cond(
      whole,
      lambda: decode_center_crop(image_bytes, image_size),
      lambda: _resize(tf.image.decode_and_crop_jpeg(image_bytes, window,
                                                    channels=3), image_size))


def normalize(image):
  image = tf.cast(image, tf.float32)
  image -= tf.constant(MEAN_RGB, shape=[1, 1, 3])
  return image / tf.constant(STDDEV_RGB, shape=[1, 1, 3])


def preprocess(image_bytes, train, image_size, dtype):
  if train:
    image = decode_random_crop(image_bytes, image_size)
    image = tf.image.random_flip_left_right(image)
  else:
    image = decode_center_crop(image_bytes, image_size)
  image = tf.reshape(image, [image_size, image_size, 3])
  return tf.image.convert_image_dtype(normalize(image), dtype)


def host_split(train, num_examples=None):
  """This host's slice of the split, e.g. ``'train[0:640583]'``."""
  name = 'train' if train else 'validation'
  total = num_examples or (TRAIN_IMAGES if train else EVAL_IMAGES)
  per_host = total // jax.process_count()
  start = jax.process_index() * per_host
  return f'{name}[{start}:{start + per_host}]'


def create_split(batch_size, train, dtype=tf.float32, image_size=IMAGE_SIZE,
                 cache=False, data_dir=None, num_examples=None,
                 shuffle_seed=0):
  """Batches of ``{'image': [B, S, S, 3], 'label': [B]}``, repeated forever.

  Args:
    batch_size: batch size of this host.
    train: the train split (shuffled, augmented) or the validation split.
    dtype: image dtype (``tf.float32``, ``tf.bfloat16`` or ``tf.float16``).
    image_size: side of the square images.
    cache: cache the encoded examples in memory.
    data_dir: TFDS data dir (default: TFDS's).
    num_examples: size of the split (default: ImageNet's).
    shuffle_seed: seed of the train shuffle.
  """
  ds = tfds.load(DATASET, split=host_split(train, num_examples),
                 data_dir=data_dir,
                 decoders={'image': tfds.decode.SkipDecoding()})
  options = tf.data.Options()
  options.threading.private_threadpool_size = 48
  options.threading.max_intra_op_parallelism = 1
  ds = ds.with_options(options)
  if cache:
    ds = ds.cache()
  if train:
    ds = ds.repeat().shuffle(16 * batch_size, seed=shuffle_seed)

  def decode(example):
    return {'image': preprocess(example['image'], train, image_size, dtype),
            'label': example['label']}

  ds = ds.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
  ds = ds.batch(batch_size, drop_remainder=True)
  if not train:
    ds = ds.repeat()
  return ds.prefetch(10)


def synthetic_batches(batch_size, image_size, dtype=onp.float32,
                      num_classes=NUM_CLASSES, num_distinct=4, seed=0,
                      start=0):
  """An endless iterator over ``num_distinct`` fixed random batches.

  For benchmarks and offline runs: no input pipeline cost, and a model can
  visibly fit the few batches.  ``start`` is the index of the first batch
  (a resumed run passes its step).
  """
  rng = onp.random.RandomState(seed)
  batches = [{
      'image': rng.normal(size=(batch_size, image_size, image_size,
                                3)).astype(dtype),
      'label': rng.randint(0, num_classes, size=(batch_size,)).astype(
          onp.int32),
  } for _ in range(num_distinct)]
  i = start
  while True:
    yield batches[i % num_distinct]
    i += 1
