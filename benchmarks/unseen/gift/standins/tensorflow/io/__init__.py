"""Stand-in: tensorflow.io.gfile on the local file system."""
from tensorflow.io import gfile
