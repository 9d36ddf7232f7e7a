"""``flax.deprecated`` (v0.3.6): the home of ``flax.deprecated.nn``."""

from flaxlegacy import nn  # pylint: disable=unused-import
