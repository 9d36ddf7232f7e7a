"""Stand-ins for names that NumPy, Python and JAX removed since 2020.

Each module here implements names listed in ``flaxlegacy._names`` (the
``*_ALIASES`` tables and the ``jax.lib.xla_bridge`` module path).  They are
installed by ``flaxlegacy._activate`` only in legacy processes and only where
the name is absent; nothing here replaces a name that exists.
"""
