"""The one table of legacy names.

Everything flaxlegacy knows about legacy names lives here, in the spirit of
``six.moves``: the import hook (``_hook``), the JAX aliases installed at
activation (``_activate``), the coverage table in the docs and the
``flaxlegacy check`` scanner all read these tables, so what is documented,
what is scanned for and what is served cannot drift apart.

This module is pure data plus a few lookups; it must stay cheap to import
because the start-up hook imports it in every Python process.

Version labels follow the legacy tags: ``v0.1.0rc2``, ``v0.2``, ``v0.2.2``,
``0.3.0``, ``0.3.1`` ... ``v0.3.6`` (then ``v0.4.0``, ``v0.5.3`` for optim).
"""

import collections

LEGACY_VERSIONS = ('v0.1.0rc2', 'v0.2', 'v0.2.2', '0.3.0', '0.3.1', 'v0.3.2',
                   'v0.3.3', 'v0.3.4', 'v0.3.5', 'v0.3.6', 'v0.4.0', 'v0.4.1',
                   'v0.5.3')

# A legacy module path and the module that serves it.
#   legacy:  the dotted path legacy code imports.
#   target:  the module flaxlegacy imports in its place ('' = built by
#            ``factory`` in _activate).
#   since / until: first and last legacy version with that path.
#   modern:  where the functionality lives today (for `flaxlegacy check`).
ModuleEntry = collections.namedtuple(
    'ModuleEntry', 'legacy target since until modern')

_NN_SUBMODULES = (
    # name, since, modern equivalent
    ('activation', 'v0.1.0rc2', 'flax.linen.activation'),
    ('attention', 'v0.1.0rc2', 'flax.linen.attention'),
    ('base', 'v0.1.0rc2', 'flax.linen.Module'),
    ('initializers', 'v0.1.0rc2', 'flax.linen.initializers'),
    ('linear', 'v0.1.0rc2', 'flax.linen.linear'),
    ('normalization', 'v0.1.0rc2', 'flax.linen.normalization'),
    ('pooling', 'v0.1.0rc2', 'flax.linen.pooling'),
    ('recurrent', 'v0.1.0rc2', 'flax.linen.recurrent'),
    ('stochastic', 'v0.1.0rc2', 'flax.linen.Module.make_rng'),
    ('utils', 'v0.1.0rc2', None),
)

_OPTIM_SUBMODULES = (
    ('base', 'v0.2', 'optax'),
    ('sgd', 'v0.2', 'optax.sgd'),
    ('momentum', 'v0.2', 'optax.sgd(momentum=...)'),
    ('adam', 'v0.2', 'optax.adam / optax.adamw'),
    ('adagrad', 'v0.2', 'optax.adagrad'),
    ('rmsprop', 'v0.2', 'optax.rmsprop'),
    ('lamb', 'v0.2', 'optax.lamb'),
    ('lars', 'v0.2', 'optax.lars'),
    ('adafactor', 'v0.2.2', 'optax.adafactor'),
    ('adadelta', '0.3.1', 'optax.adadelta'),
    ('adabelief', 'v0.3.5', 'optax.adabelief'),
    ('weight_norm', 'v0.2', None),
    ('dynamic_scale', 'v0.2', 'flax.training.dynamic_scale'),
)


def _module_entries():
  entries = [
      ModuleEntry('flax.nn', 'flaxlegacy.nn', 'v0.1.0rc2', 'v0.3.6',
                  'flax.linen'),
      ModuleEntry('flax.deprecated', 'flaxlegacy.deprecated', 'v0.3.6',
                  'v0.3.6', None),
      ModuleEntry('flax.deprecated.nn', 'flaxlegacy.nn', 'v0.3.6', 'v0.3.6',
                  'flax.linen'),
      ModuleEntry('flax.optim', 'flaxlegacy.optim', 'v0.1.0rc2', 'v0.5.3',
                  'optax'),
  ]
  for name, since, modern in _NN_SUBMODULES:
    # flax.nn.X is a real module path up to v0.3.5; v0.3.6 moved it to
    # flax.deprecated.nn.X (``from flax import nn`` kept working).
    entries.append(ModuleEntry('flax.nn.' + name, 'flaxlegacy.nn.' + name,
                               since, 'v0.3.5', modern))
    entries.append(ModuleEntry('flax.deprecated.nn.' + name,
                               'flaxlegacy.nn.' + name, 'v0.3.6', 'v0.3.6',
                               modern))
  for name, since, modern in _OPTIM_SUBMODULES:
    entries.append(ModuleEntry('flax.optim.' + name,
                               'flaxlegacy.optim.' + name, since, 'v0.5.3',
                               modern))
  # JAX module paths that were removed; served only where absent.
  entries += [
      ModuleEntry('jax.config', '', 'jax<0.4.29', 'jax 0.4.28',
                  'jax.config (the object): `from jax import config`'),
      ModuleEntry('jax.experimental.optimizers',
                  'jax.example_libraries.optimizers', 'jax<0.3.16',
                  'jax 0.3.15', 'jax.example_libraries.optimizers or optax'),
      ModuleEntry('jax.experimental.stax', 'jax.example_libraries.stax',
                  'jax<0.3.16', 'jax 0.3.15', 'jax.example_libraries.stax'),
      ModuleEntry('jax.linear_util', 'jax.extend.linear_util', 'jax<0.4.24',
                  'jax 0.4.23', 'jax.extend.linear_util'),
      ModuleEntry('jax.lib.xla_bridge', 'flaxlegacy.compat.xla_bridge',
                  'jax<0.8.0', 'jax 0.8.0',
                  'jax.devices() / jax.device_count() / jax.default_backend() '
                  '/ jax.extend.backend.get_backend'),
        ModuleEntry('jax.interpreters.sharded_jit',
                  'flaxlegacy.compat.sharded_jit', 'jax<0.3.16', 'jax 0.3.16',
                  'jax.sharding.PartitionSpec; jax.jit with shardings'),
      ModuleEntry('jax.lib.xla_client', 'flaxlegacy.compat.xla_client',
                  'jax<0.9.0', 'jax 0.9.0',
                  'jaxlib.xla_client (Device, Client, Shape, ...); '
                  'jax.Device for type annotations'),
  ]
  return tuple(entries)


MODULES = _module_entries()
MODULES_BY_LEGACY = {e.legacy: e for e in MODULES}

# How `flaxlegacy upgrade` spells a served JAX module path whose stand-in is
# not for upgraded code (rules/jax_names.py): today's module, or None where
# nothing today has its names (the upgrade leaves a TODO).
UPGRADE_MODULES = {
    'jax.interpreters.sharded_jit': 'jax.sharding',  # PartitionSpec
    'jax.lib.xla_client': None,
}

# The roots under which the import hook answers.  Any path below one of
# these that the table does not list gets an ImportError naming coverage.
LEGACY_ROOTS = ('flax.nn', 'flax.optim', 'flax.deprecated')

# Attribute aliases installed at activation, each only where absent.
#   owner:   module whose attribute is added.
#   name:    attribute name.
#   value:   'module:attr' of the replacement, or '@name' of a small
#            function defined in _activate.
#   removed: the JAX version that removed it (for docs and `check`).
#   modern:  what to write today.
#   faithful: False where the replacement is only approximately faithful.
Alias = collections.namedtuple('Alias', 'owner name value removed modern faithful')

JAX_ALIASES = (
    Alias('jax', 'tree_map', 'jax.tree_util:tree_map', 'jax 0.6.0',
          'jax.tree_util.tree_map', True),
    Alias('jax', 'tree_multimap', 'jax.tree_util:tree_map', 'jax 0.3.16',
          'jax.tree_util.tree_map', True),
    Alias('jax.tree_util', 'tree_multimap', 'jax.tree_util:tree_map',
          'jax 0.3.16', 'jax.tree_util.tree_map', True),
    Alias('jax', 'tree_leaves', 'jax.tree_util:tree_leaves', 'jax 0.6.0',
          'jax.tree_util.tree_leaves', True),
    Alias('jax', 'tree_flatten', 'jax.tree_util:tree_flatten', 'jax 0.6.0',
          'jax.tree_util.tree_flatten', True),
    Alias('jax', 'tree_unflatten', 'jax.tree_util:tree_unflatten', 'jax 0.6.0',
          'jax.tree_util.tree_unflatten', True),
    Alias('jax', 'tree_structure', 'jax.tree_util:tree_structure', 'jax 0.6.0',
          'jax.tree_util.tree_structure', True),
    Alias('jax', 'tree_transpose', 'jax.tree_util:tree_transpose', 'jax 0.6.0',
          'jax.tree_util.tree_transpose', True),
    Alias('jax', 'treedef_is_leaf', 'jax.tree_util:treedef_is_leaf',
          'jax 0.6.0', 'jax.tree_util.treedef_is_leaf', True),
    Alias('jax.ops', 'index_update', '@index_update', 'jax 0.3.2',
          'x.at[idx].set(y)', True),
    Alias('jax.ops', 'index_add', '@index_add', 'jax 0.3.2',
          'x.at[idx].add(y)', True),
    Alias('jax.ops', 'index_mul', '@index_mul', 'jax 0.3.2',
          'x.at[idx].multiply(y)', True),
    Alias('jax.ops', 'index_min', '@index_min', 'jax 0.3.2',
          'x.at[idx].min(y)', True),
    Alias('jax.ops', 'index_max', '@index_max', 'jax 0.3.2',
          'x.at[idx].max(y)', True),
    Alias('jax.ops', 'index', 'numpy:s_', 'jax 0.3.2',
          'plain indexing / numpy.s_', True),
    Alias('jax.random', 'shuffle', '@shuffle', 'jax 0.4.31',
          'jax.random.permutation(key, x, axis, independent=True)', True),
    Alias('jax.lax', 'tie_in', '@tie_in', 'jax 0.4.29', 'drop it (no-op)',
          True),
    Alias('jax.nn', 'normalize', '@normalize', 'jax 0.4.29',
          'jax.nn.standardize (which clips the variance at 0)', True),
    Alias('jax', 'ShapedArray', 'jax.core:ShapedArray', 'jax 0.4.14',
          'jax.core.ShapedArray', True),
    Alias('jax', 'host_id', 'jax:process_index', 'renamed in jax 0.2.13',
          'jax.process_index', True),
    Alias('jax', 'host_count', 'jax:process_count', 'renamed in jax 0.2.13',
          'jax.process_count', True),
    Alias('jax', 'host_ids', '@host_ids', 'renamed in jax 0.2.13',
          'range(jax.process_count())', True),
    Alias('jax.numpy', 'DeviceArray', 'jax:Array', 'jax 0.4.14', 'jax.Array',
          False),
    Alias('jax.interpreters.xla', 'DeviceArray', 'jax:Array', 'jax 0.4.11',
          'jax.Array', False),
    Alias('jax.experimental.pjit', 'with_sharding_constraint',
          'jax.lax:with_sharding_constraint', 'jax 0.4.24',
          'jax.lax.with_sharding_constraint', True),
    Alias('jax.config', 'enable_omnistaging', '@noop', 'jax 0.2.12',
          'drop it (omnistaging is always on)', True),
    Alias('jax.config', 'omnistaging_enabled', '@true', 'jax 0.2.12',
          'drop it (always True)', True),
    Alias('jax.test_util', 'check_eq', '@check_eq', 'jax 0.3.8',
          'numpy.testing.assert_allclose per leaf', False),
)

# More removed names, same rules as JAX_ALIASES (added at activation, each
# only where absent).  Value specs as above, plus 'module:' (empty attribute)
# for a module itself.  Implementations: flaxlegacy/compat/.
_C = 'flaxlegacy.compat.'

# JAX functions and test helpers used beside Flax (issue 18, section 3).
JAX_REMOVED_API = (
    Alias('jax.lib', 'xla_bridge', _C + 'xla_bridge:', 'jax 0.8.0',
          'jax.devices() / jax.device_count() / jax.default_backend()', True),
    Alias('jax.interpreters', 'sharded_jit', _C + 'sharded_jit:',
          'jax 0.3.16', 'jax.sharding.PartitionSpec', True),
    Alias('jax.lib', 'xla_client', _C + 'xla_client:', 'jax 0.9.0',
          'jaxlib.xla_client (jax.Device for type annotations)', True),
    Alias('jax', 'device_put_sharded', _C + 'jax_api:device_put_sharded',
          'jax 0.10.0', 'jax.device_put(jnp.stack(shards), NamedSharding(...))',
          True),
    Alias('jax', 'device_put_replicated',
          _C + 'jax_api:device_put_replicated', 'jax 0.10.0',
          'jax.device_put(jnp.stack([x] * n), NamedSharding(...)) or '
          'flax.jax_utils.replicate', True),
    Alias('jax', 'custom_transforms', _C + 'jax_api:custom_transforms',
          'jax 0.2.12', 'jax.custom_jvp / jax.custom_vjp', True),
    Alias('jax', 'defjvp_all', _C + 'jax_api:defjvp_all', 'jax 0.2.12',
          'jax.custom_jvp + f.defjvp', True),
    Alias('jax', 'defjvp', _C + 'jax_api:defjvp', 'jax 0.2.12',
          'jax.custom_jvp + f.defjvps', True),
    Alias('jax', 'defvjp_all', _C + 'jax_api:defvjp_all', 'jax 0.2.12',
          'jax.custom_vjp + f.defvjp(fwd, bwd)', True),
    Alias('jax', 'defvjp', _C + 'jax_api:defvjp', 'jax 0.2.12',
          'jax.custom_vjp + f.defvjp(fwd, bwd)', True),
    Alias('jax.test_util', 'JaxTestCase', _C + 'jax_test_util:JaxTestCase',
          'jax 0.3.8', 'absltest.TestCase + numpy.testing / chex', False),
    Alias('jax.test_util', 'check_close', _C + 'jax_test_util:check_close',
          'jax 0.3.8', 'numpy.testing.assert_allclose per leaf', True),
    Alias('jax.test_util', 'tolerance', _C + 'jax_test_util:tolerance',
          'jax 0.3.8', 'explicit atol / rtol', True),
    Alias('jax.test_util', 'default_tolerance',
          _C + 'jax_test_util:default_tolerance', 'jax 0.3.8',
          'explicit atol / rtol', True),
    Alias('jax.test_util', 'device_under_test',
          _C + 'jax_test_util:device_under_test', 'jax 0.3.8',
          'jax.default_backend()', True),
    Alias('jax.test_util', 'skip_on_devices',
          _C + 'jax_test_util:skip_on_devices', 'jax 0.3.8',
          'unittest.skipIf(jax.default_backend() in ...)', True),
    Alias('jax.test_util', 'format_shape_dtype_string',
          _C + 'jax_test_util:format_shape_dtype_string', 'jax 0.3.8',
          "f'{dtype.name}[{shape}]'", True),
    Alias('jax.test_util', 'cases_from_list',
          _C + 'jax_test_util:cases_from_list', 'jax 0.3.8', 'list(cases)',
          False),
    Alias('jax.test_util', 'rand_default', _C + 'jax_test_util:rand_default',
          'jax 0.3.8', 'numpy.random.RandomState(seed).standard_normal',
          False),
    Alias('jax.test_util', 'rand_small', _C + 'jax_test_util:rand_small',
          'jax 0.3.8', 'numpy.random.RandomState(seed).standard_normal',
          False),
    Alias('jax.test_util', 'rand_positive', _C + 'jax_test_util:rand_positive',
          'jax 0.3.8', 'numpy.random.RandomState(seed)', False),
    Alias('jax.test_util', 'rand_nonzero', _C + 'jax_test_util:rand_nonzero',
          'jax 0.3.8', 'numpy.random.RandomState(seed)', False),
    Alias('jax.test_util', 'rand_not_small',
          _C + 'jax_test_util:rand_not_small', 'jax 0.3.8',
          'numpy.random.RandomState(seed)', False),
    Alias('jax.test_util', 'rand_uniform', _C + 'jax_test_util:rand_uniform',
          'jax 0.3.8', 'numpy.random.RandomState(seed).uniform', False),
    Alias('jax.test_util', 'rand_int', _C + 'jax_test_util:rand_int',
          'jax 0.3.8', 'numpy.random.RandomState(seed).randint', False),
    Alias('jax.test_util', 'rand_bool', _C + 'jax_test_util:rand_bool',
          'jax 0.3.8', 'numpy.random.RandomState(seed).rand(...) < 0.5',
          False),
) + tuple(
    # jax.numpy followed NumPy's removals of these.
    Alias('jax.numpy', name, value, removed, today, True)
    for name, value, removed, today in (
        ('product', _C + 'numpy_names:jnp_product', 'jax 0.4.x',
         'jax.numpy.prod'),
        ('cumproduct', _C + 'numpy_names:jnp_cumproduct', 'jax 0.4.x',
         'jax.numpy.cumprod'),
        ('sometrue', _C + 'numpy_names:jnp_sometrue', 'jax 0.4.x',
         'jax.numpy.any'),
        ('alltrue', _C + 'numpy_names:jnp_alltrue', 'jax 0.4.x',
         'jax.numpy.all'),
        ('round_', _C + 'numpy_names:jnp_round_', 'jax 0.4.x',
         'jax.numpy.round'),
        ('msort', _C + 'numpy_names:jnp_msort', 'jax 0.4.x',
         'jax.numpy.sort(a, axis=0)'),
        ('trapz', _C + 'numpy_names:jnp_trapz', 'jax 0.4.x',
         'jax.numpy.trapezoid'),
        ('in1d', _C + 'numpy_names:jnp_in1d', 'jax 0.4.x',
         'jax.numpy.isin(a, b).ravel()'),
        ('row_stack', _C + 'numpy_names:jnp_row_stack', 'jax 0.4.x',
         'jax.numpy.vstack'),
        ('NINF', _C + 'numpy_names:NINF', 'jax 0.4.x', '-jax.numpy.inf'),
        ('NZERO', _C + 'numpy_names:NZERO', 'jax 0.4.x', '-0.0'),
        ('PZERO', _C + 'numpy_names:PZERO', 'jax 0.4.x', '0.0'),
    ))

# Private names of flax modules that still exist (legacy surface, issue 18
# section 1): added to the real module, only where absent.
FLAX_PRIVATE_ALIASES = (
    Alias('flax.jax_utils', '_replicate', _C + 'jax_api:_replicate',
          'flax v0.3.6', 'flax.jax_utils.replicate', True),
    Alias('flax.jax_utils', '_is_omnistaging', _C + 'jax_api:_is_omnistaging',
          'flax v0.2.2', 'drop it (omnistaging is always on)', True),
    # flax 0.3.x linen names that were renamed or dropped (early linen).
    Alias('flax.linen', 'ConvLSTM',
          'flaxlegacy.migrate.legacy_cells:ConvLSTM', 'flax 0.6.4',
          'flax.linen.ConvLSTMCell', True),
    Alias('flax.linen.recurrent', 'ConvLSTM',
          'flaxlegacy.migrate.legacy_cells:ConvLSTM', 'flax 0.6.4',
          'flax.linen.ConvLSTMCell', True),
    Alias('flax.linen.linear', 'zeros', 'flax.linen.initializers:zeros',
          'flax 0.4.x', 'flax.linen.initializers.zeros', True),
    Alias('flax.linen.linear', 'lecun_normal',
          'flax.linen.initializers:lecun_normal', 'flax 0.4.x',
          'flax.linen.initializers.lecun_normal', True),
    Alias('flax.linen.linear', 'variance_scaling',
          'flax.linen.initializers:variance_scaling', 'flax 0.4.x',
          'flax.linen.initializers.variance_scaling', True),
    Alias('flax.linen.attention', 'zeros', 'flax.linen.initializers:zeros',
          'flax 0.4.x', 'flax.linen.initializers.zeros', True),
)

# NumPy names removed in 1.24 / 2.0 / 2.x, with their 2020 meaning (issue 18
# section 2).  np.bool and np.long are absent on purpose: NumPy 2 defines
# them again with other meanings, and nothing that exists is overridden
# (docs/decisions.md).
_NP_ALIASES = (
    # name, value, removed, today
    ('float', 'builtins:float', 'numpy 1.24', 'float'),
    ('int', 'builtins:int', 'numpy 1.24', 'int'),
    ('object', 'builtins:object', 'numpy 1.24', 'object'),
    ('str', 'builtins:str', 'numpy 1.24', 'str'),
    ('complex', 'builtins:complex', 'numpy 1.24', 'complex'),
    ('unicode', 'builtins:str', 'numpy 1.24', 'str'),
    ('warnings', 'warnings:', 'numpy 1.24', 'import warnings'),
    ('int0', 'numpy:intp', 'numpy 2.0', 'numpy.intp'),
    ('uint0', 'numpy:uintp', 'numpy 2.0', 'numpy.uintp'),
    ('bool8', 'numpy:bool_', 'numpy 2.0', 'numpy.bool_'),
    ('str0', 'numpy:str_', 'numpy 2.0', 'numpy.str_'),
    ('bytes0', 'numpy:bytes_', 'numpy 2.0', 'numpy.bytes_'),
    ('void0', 'numpy:void', 'numpy 2.0', 'numpy.void'),
    ('object0', 'numpy:object_', 'numpy 2.0', 'numpy.object_'),
    ('float_', 'numpy:float64', 'numpy 2.0', 'numpy.float64'),
    ('complex_', 'numpy:complex128', 'numpy 2.0', 'numpy.complex128'),
    ('cfloat', 'numpy:complex128', 'numpy 2.0', 'numpy.complex128'),
    ('singlecomplex', 'numpy:complex64', 'numpy 2.0', 'numpy.complex64'),
    ('longfloat', 'numpy:longdouble', 'numpy 2.0', 'numpy.longdouble'),
    ('longcomplex', 'numpy:clongdouble', 'numpy 2.0', 'numpy.clongdouble'),
    ('clongfloat', 'numpy:clongdouble', 'numpy 2.0', 'numpy.clongdouble'),
    ('string_', 'numpy:bytes_', 'numpy 2.0', 'numpy.bytes_'),
    ('unicode_', 'numpy:str_', 'numpy 2.0', 'numpy.str_'),
    ('Inf', 'numpy:inf', 'numpy 2.0', 'numpy.inf'),
    ('Infinity', 'numpy:inf', 'numpy 2.0', 'numpy.inf'),
    ('infty', 'numpy:inf', 'numpy 2.0', 'numpy.inf'),
    ('PINF', 'numpy:inf', 'numpy 2.0', 'numpy.inf'),
    ('NINF', _C + 'numpy_names:NINF', 'numpy 2.0', '-numpy.inf'),
    ('NaN', 'numpy:nan', 'numpy 2.0', 'numpy.nan'),
    ('NZERO', _C + 'numpy_names:NZERO', 'numpy 2.0', '-0.0'),
    ('PZERO', _C + 'numpy_names:PZERO', 'numpy 2.0', '0.0'),
    ('math', 'math:', 'numpy 2.0', 'import math'),
    ('product', _C + 'numpy_names:product', 'numpy 2.0', 'numpy.prod'),
    ('cumproduct', _C + 'numpy_names:cumproduct', 'numpy 2.0',
     'numpy.cumprod'),
    ('sometrue', _C + 'numpy_names:sometrue', 'numpy 2.0', 'numpy.any'),
    ('alltrue', _C + 'numpy_names:alltrue', 'numpy 2.0', 'numpy.all'),
    ('round_', _C + 'numpy_names:round_', 'numpy 2.0', 'numpy.round'),
    ('msort', _C + 'numpy_names:msort', 'numpy 2.0',
     'numpy.sort(a, axis=0)'),
    ('asfarray', _C + 'numpy_names:asfarray', 'numpy 2.0',
     'numpy.asarray(a, dtype=float)'),
    ('asscalar', _C + 'numpy_names:asscalar', 'numpy 1.23', 'a.item()'),
    ('find_common_type', _C + 'numpy_names:find_common_type', 'numpy 2.0',
     'numpy.result_type / numpy.promote_types'),
    ('cast', _C + 'numpy_names:cast', 'numpy 2.0',
     'numpy.asarray(x).astype(dtype)'),
    ('issubclass_', _C + 'numpy_names:issubclass_', 'numpy 2.0',
     'issubclass'),
    ('safe_eval', _C + 'numpy_names:safe_eval', 'numpy 2.0',
     'ast.literal_eval'),
    ('mat', _C + 'numpy_names:mat', 'numpy 2.0', 'numpy.asmatrix'),
    ('trapz', _C + 'numpy_names:trapz', 'numpy 2.4', 'numpy.trapezoid'),
    ('in1d', _C + 'numpy_names:in1d', 'numpy 2.4',
     'numpy.isin(a, b).ravel()'),
    ('DataSource', 'numpy.lib.npyio:DataSource', 'numpy 2.0',
     'numpy.lib.npyio.DataSource'),
    ('byte_bounds', 'numpy.lib.array_utils:byte_bounds', 'numpy 2.0',
     'numpy.lib.array_utils.byte_bounds'),
    ('compare_chararrays', 'numpy.char:compare_chararrays', 'numpy 2.0',
     'numpy.char.compare_chararrays'),
    ('format_parser', 'numpy.rec:format_parser', 'numpy 2.0',
     'numpy.rec.format_parser'),
    ('add_newdoc', 'numpy.lib:add_newdoc', 'numpy 2.0',
     'numpy.lib.add_newdoc'),
    ('add_docstring', 'numpy.lib:add_docstring', 'numpy 2.0',
     'numpy.lib.add_docstring'),
)
NUMPY_ALIASES = tuple(
    Alias('numpy', name, value, removed, today,
          name != 'find_common_type')
    for name, value, removed, today in _NP_ALIASES)

# NumPy 2 names whose meaning changed: not overridden, reported by
# `flaxlegacy check` with this note.
CHANGED_MEANING = {
    'numpy.bool': 'NumPy 2 defines numpy.bool again, as numpy.bool_ (in 2020 '
                  'it was the builtin bool); dtype=np.bool means the same, '
                  'isinstance(True, np.bool) does not; flaxlegacy does not '
                  'override it',
    'numpy.long': 'NumPy 2 defines numpy.long again, as the C long integer '
                  'type (in 2020 it was the builtin int); dtype=np.long means '
                  'the same on 64-bit Linux; flaxlegacy does not override it',
}

# Python standard-library names removed since 3.9 that legacy code used.
_COLLECTIONS_ABCS = (
    'Awaitable', 'Coroutine', 'AsyncIterable', 'AsyncIterator',
    'AsyncGenerator', 'Hashable', 'Iterable', 'Iterator', 'Generator',
    'Reversible', 'Sized', 'Container', 'Callable', 'Collection', 'Set',
    'MutableSet', 'Mapping', 'MutableMapping', 'MappingView', 'KeysView',
    'ItemsView', 'ValuesView', 'Sequence', 'MutableSequence', 'ByteString')
PYTHON_ALIASES = tuple(
    Alias('collections', name, 'collections.abc:' + name, 'python 3.10',
          'collections.abc.' + name, True)
    for name in _COLLECTIONS_ABCS) + (
        Alias('inspect', 'getargspec', _C + 'python_names:getargspec',
              'python 3.11', 'inspect.getfullargspec / inspect.signature',
              True),
        Alias('inspect', 'ArgSpec', _C + 'python_names:ArgSpec', 'python 3.11',
              'inspect.FullArgSpec', True),
    )

# Every name activation adds, in installation order.
ALIASES = (JAX_ALIASES + JAX_REMOVED_API + FLAX_PRIVATE_ALIASES +
           NUMPY_ALIASES + PYTHON_ALIASES)

# Policy switches: existing settings whose default changed.  Applied when
# the legacy API is first imported; each can be turned off by its env var.
Policy = collections.namedtuple('Policy', 'name setting legacy_value env doc')

POLICIES = (
    Policy('prng', 'jax_threefry_partitionable', False, 'FLAXLEGACY_PRNG',
           'legacy random streams: split/normal/uniform/dropout give the '
           '2020-2024 numbers (default since jax 0.5.0 is partitionable)'),
    Policy('checkpoints', 'flax_use_orbax_checkpointing', False,
           'FLAXLEGACY_CHECKPOINTS',
           'flax.training.checkpoints writes legacy single-file msgpack '
           'checkpoints (today\'s default is an Orbax directory)'),
    Policy('frozendict', 'flax_return_frozendict', True,
           'FLAXLEGACY_FROZENDICT',
           'linen init / init_with_output / apply(mutable=...) and '
           'Module.variables return FrozenDicts, as flax 0.3 did '
           '(variables.unfreeze(), rest, params = variables.pop("params"); '
           'plain dicts since flax 0.7.1)'),
)

# Changed JAX / NumPy / Flax behaviour restored in legacy processes
# (flaxlegacy/_behaviour.py; the early-linen rows in
# flaxlegacy/compat/early_linen.py), announced with the policies and turned
# off the same way.
#   name:    as in the log line.
#   env:     opt-out variable (``modern``).
#   changed: the JAX / NumPy / Flax version whose behaviour legacy code
#            trips on.
#   doc:     what legacy did and what is restored.
Behaviour = collections.namedtuple('Behaviour', 'name env changed doc')

BEHAVIOURS = (
    Behaviour('scalars', 'FLAXLEGACY_SCALARS', 'jax 0.4.3x (2024), NumPy 2.4',
              'int(), float(), complex() of a one-element array convert it, '
              'and numpy.arange takes one-element arrays as bounds '
              '(np.arange(np.array([31]))), as NumPy 1.x did (today '
              'TypeError unless 0-d)'),
    Behaviour('pmap', 'FLAXLEGACY_PMAP', 'jax 0.10.0',
              'pmap moves an input committed to another device layout '
              '(keys derived from a replicated step) instead of raising '
              '"Sharding passed to jit does not match"'),
    Behaviour('iteration', 'FLAXLEGACY_ITERATION', 'jax 0.2.22',
              'iterating a 1-D array yields NumPy scalars (hashable dict '
              'keys) as legacy DeviceArrays did; rows of n-D arrays stay '
              'jax.Arrays'),
    Behaviour('arguments', 'FLAXLEGACY_ARGUMENTS',
              'jax 0.4.27 (clip keywords) / jax 0.2.0 omnistaging / '
              'jax 0.10.0 (remat concrete) / NumPy 2 (integer overflow)',
              'jnp.clip(a_min=, a_max=) keywords; lax.dynamic_slice slice '
              'sizes given as an array of constants inside jit; '
              'jax.remat / jax.checkpoint(concrete=False); '
              'jnp.array(-1, dtype=jnp.uint32) wraps around'),
    # Early linen (flax 0.3.x), flaxlegacy/compat/early_linen.py.
    Behaviour('linen_keys', 'FLAXLEGACY_LINEN_KEYS', 'flax 0.4.0',
              'linen parameter and RNG keys derived as flax 0.3.x did (each '
              'scope name folded in by its hash, the make_rng counter folded '
              'in directly), so the same seed initialises the flax 0.3 '
              'numbers; since flax 0.4 one fold of a hash of the whole path'),
    Behaviour('initializers', 'FLAXLEGACY_INITIALIZERS', 'flax 0.4.0',
              'linen layers call an initializer as init(key, shape), '
              'without param_dtype, when it cannot take a dtype '
              '(def cplx_init(rng, shape)) or a functools.partial binds '
              'dtype= (today TypeError), or when it states a dtype of its '
              'own (lecun_normal(dtype=jnp.float64)) and the layer\'s '
              'param_dtype is left at its default (today float32 '
              'parameters)'),
    Behaviour('param_override', 'FLAXLEGACY_PARAM_OVERRIDE', 'flax 0.4.0',
              'a Module subclass overriding param(self, name, init_fn, '
              'shape) is called without the param_dtype argument '
              'nn.Conv / nn.Dense pass today (today TypeError)'),
    Behaviour('carries', 'FLAXLEGACY_CARRIES', 'flax 0.7.0',
              'LSTMCell / GRUCell / OptimizedLSTMCell / ConvLSTMCell.'
              'initialize_carry(rng, batch_dims, size[, init_fn]) as the '
              'flax 0.3 static method beside today\'s instance method, and '
              'the first three built without features (hidden size from '
              'the carry)'),
    Behaviour('attention', 'FLAXLEGACY_ATTENTION', 'flax 0.7.4',
              'MultiHeadDotProductAttention(...)(inputs_q, inputs_kv, mask'
              '[, deterministic]) with the mask as third positional argument '
              '(today it is inputs_v)'),
    Behaviour('early_stopping', 'FLAXLEGACY_EARLY_STOPPING', 'flax 0.7.5',
              'has_improved, state = early_stop.update(metric) as flax 0.3 '
              'returned it, beside today\'s state = early_stop.update(metric)'),
    Behaviour('group_norm', 'FLAXLEGACY_GROUP_NORM', 'flax 0.3.6',
              'GroupNorm applies scale / bias stored as (1, ..., 1, C), '
              'the input\'s rank, as flax <= 0.3.5 created them (today '
              'ScopeParamShapeError; init still creates (C,))'),
)

# Symbols (for `flaxlegacy check` and the coverage docs): legacy qualified
# name -> (since, until, modern equivalent).  Names that flaxlegacy does not
# serve are listed in UNSUPPORTED with the reason.
Symbol = collections.namedtuple('Symbol', 'name since until modern')

_NN_SYMBOLS = (
    ('Module', 'flax.linen.Module (setup/@compact; params via self.param)'),
    ('Model', 'flax.training.train_state.TrainState (apply_fn + params)'),
    ('Collection', 'linen variable collections (mutable=[...])'),
    ('capture_module_outputs', 'Module.sow / capture_intermediates=True'),
    ('module', 'flax.linen.compact on a Module subclass'),
    ('module_method', 'an ordinary method of a linen Module'),
    ('stateful', "linen variables + apply(..., mutable=['batch_stats'])"),
    ('get_state', 'linen Module.variable'),
    ('make_rng', "linen Module.make_rng('dropout')"),
    ('stochastic', "apply(..., rngs={'dropout': key})"),
    ('is_stochastic', "linen Module.has_rng('dropout')"),
    ('dropout', 'flax.linen.Dropout'),
    ('Dense', 'flax.linen.Dense'),
    ('DenseGeneral', 'flax.linen.DenseGeneral'),
    ('Conv', 'flax.linen.Conv'),
    ('ConvTranspose', 'flax.linen.ConvTranspose'),
    ('Embed', 'flax.linen.Embed'),
    ('BatchNorm', 'flax.linen.BatchNorm'),
    ('LayerNorm', 'flax.linen.LayerNorm'),
    ('GroupNorm', 'flax.linen.GroupNorm'),
    ('max_pool', 'flax.linen.max_pool'),
    ('avg_pool', 'flax.linen.avg_pool'),
    ('LSTMCell', 'flax.linen.LSTMCell'),
    ('OptimizedLSTMCell', 'flax.linen.OptimizedLSTMCell'),
    ('GRUCell', 'flax.linen.GRUCell'),
    ('ConvLSTM', 'flax.linen.ConvLSTMCell'),
    ('dot_product_attention', 'flax.linen.dot_product_attention'),
    ('MultiHeadDotProductAttention', 'flax.linen.MultiHeadDotProductAttention'),
    ('SelfAttention', 'flax.linen.SelfAttention'),
    ('initializers', 'flax.linen.initializers / jax.nn.initializers'),
    ('activation', 'flax.linen.activation / jax.nn'),
)

_OPTIM_SYMBOLS = (
    ('Optimizer', 'flax.training.train_state.TrainState'),
    ('OptimizerDef', 'optax.GradientTransformation'),
    ('OptimizerState', 'optax state (TrainState.opt_state)'),
    ('MultiOptimizer', 'optax.multi_transform'),
    ('ModelParamTraversal', 'optax.multi_transform with a label tree'),
    ('GradientDescent', 'optax.sgd'),
    ('Momentum', 'optax.sgd(lr, momentum=beta, nesterov=...)'),
    ('Adam', 'optax.adam / optax.adamw'),
    ('Adagrad', 'optax.adagrad'),
    ('RMSProp', 'optax.rmsprop'),
    ('LAMB', 'optax.lamb'),
    ('LARS', 'optax.lars'),
    ('Adafactor', 'optax.adafactor'),
    ('Adadelta', 'optax.adadelta'),
    ('AdaBelief', 'optax.adabelief'),
    ('WeightNorm', 'no optax equivalent (flaxlegacy Optimizer.as_optax())'),
    ('DynamicScale', 'flax.training.dynamic_scale.DynamicScale'),
)

# Names reached through a legacy submodule (not exported at the top level).
_NN_SUBMODULE_SYMBOLS = (
    ('base.is_stateful', "linen Module.is_mutable_collection('batch_stats') "
     "or 'batch_stats' in Module.variables"),
    ('base.ModuleState', 'linen variables'),
    ('base.TransparentModule', None),
    ('base.TruncatedModule', 'capture_intermediates / Module.sow'),
    ('attention.Cache', "linen attention's 'cache' collection (decode=True)"),
    ('attention.make_padding_mask', 'flax.linen.make_attention_mask'),
    ('pooling.pool', 'flax.linen.pooling.pool'),
    ('recurrent.RNNCellBase', 'flax.linen.RNNCellBase'),
    ('activation.normalize', 'jax.nn.standardize'),
    ('linear.default_kernel_init', 'flax.linen.initializers.lecun_normal()'),
    ('linear.default_embed_init',
     "flax.linen.initializers.variance_scaling(1.0, 'fan_in', 'normal', "
     'out_axis=0)'),
    ('utils.CallStack', None),
)

# Activations re-exported at the top level of flax.nn (jax.nn functions).
_NN_ACTIVATIONS = ('celu', 'elu', 'gelu', 'glu', 'leaky_relu', 'log_sigmoid',
                   'log_softmax', 'relu', 'sigmoid', 'soft_sign', 'softmax',
                   'softplus', 'swish', 'tanh', 'silu')

# Private or version-specific names of legacy optim that user code and the
# legacy tests touch (Decision D1: exported on the package too).
_OPTIM_EXTRA = (
    ('ReplicatedOptimizer', 'jax.pmap + lax.pmean on the gradients'),
)

# flaxlegacy's own additions to flax.optim (not legacy names; the way out to
# optax and the version switch for MultiOptimizer's state layout).
_OPTIM_EXTENSIONS = (
    ('from_optax', 'wraps an optax GradientTransformation as an OptimizerDef'),
    ('OptaxOptimizerDef', 'the OptimizerDef that from_optax returns'),
    ('OptaxWrapper', 'optax state held in legacy param_states'),
    ('set_multi_optimizer_layout',
     "MultiOptimizer state layout: 'list' (<= v0.3.2) or 'tree' (v0.3.3+)"),
    ('DynamicScaleResult', 'flax.optim.dynamic_scale.DynamicScaleResult '
     '(legacy exported it from the submodule only)'),
)

_OPTIM_SINCE = {'Adagrad': 'v0.2', 'RMSProp': 'v0.2', 'LAMB': 'v0.2',
                'DynamicScale': 'v0.2', 'Adafactor': 'v0.2.2',
                'Adadelta': '0.3.1', 'AdaBelief': 'v0.3.5'}
_NN_SINCE = {'ConvTranspose': 'v0.2', 'ConvLSTM': 'v0.2.2',
             'OptimizedLSTMCell': '0.3.1', 'silu': '0.3.0'}


def _symbols():
  out = {}
  nn_names = list(_NN_SYMBOLS) + [
      (a, f'jax.nn.{a}' if a != 'tanh' else 'jax.numpy.tanh')
      for a in _NN_ACTIVATIONS]
  for prefix in ('flax.nn', 'flax.deprecated.nn'):
    for name, modern in nn_names:
      since = _NN_SINCE.get(name, 'v0.1.0rc2')
      if prefix == 'flax.deprecated.nn':
        since = 'v0.3.6'
      out[prefix + '.' + name] = Symbol(prefix + '.' + name, since, 'v0.3.6',
                                        modern)
    for name, modern in _NN_SUBMODULE_SYMBOLS:
      since = 'v0.3.6' if prefix == 'flax.deprecated.nn' else 'v0.1.0rc2'
      out[prefix + '.' + name] = Symbol(prefix + '.' + name, since, 'v0.3.6',
                                        modern)
  for name, modern in _OPTIM_SYMBOLS + _OPTIM_EXTRA:
    since = _OPTIM_SINCE.get(name, 'v0.1.0rc2')
    out['flax.optim.' + name] = Symbol('flax.optim.' + name, since, 'v0.5.3',
                                       modern)
  for name, doc in _OPTIM_EXTENSIONS:
    out['flax.optim.' + name] = Symbol('flax.optim.' + name, 'flaxlegacy',
                                       'flaxlegacy', doc)
  for alias in ALIASES:
    qual = alias.owner + '.' + alias.name
    package, version = alias.removed.split()[-2:]
    out[qual] = Symbol(qual, f'{package}<{version}', alias.removed,
                       alias.modern)
  return out


def top_level_names(package):
  """The public top-level names the table lists for 'flax.nn' / 'flax.optim'."""
  prefix = package + '.'
  return sorted(k[len(prefix):] for k in SYMBOLS
                if k.startswith(prefix) and '.' not in k[len(prefix):])


SYMBOLS = _symbols()

# Legacy names that flaxlegacy deliberately does not serve, with why.
UNSUPPORTED = {
    'jax.experimental.host_callback': 'removed from JAX; use jax.debug.callback',
    'jax.experimental.maps': 'removed from JAX; use shard_map / jax.jit',
    'jax.mask': 'removed from JAX in 0.3.16; rewrite with padding masks',
    'jax.pxla': 'JAX internals removed in 0.4.14; use flax.jax_utils',
    'jax.api': 'removed in jax 0.2.21; use the jax top level',
}


# Roots other than jax whose removed names `flaxlegacy check` reports.
ALIAS_ROOTS = ('numpy', 'collections', 'inspect', 'flax.jax_utils',
               'flax.linen')


def alias_root(fullname):
  """The root of ALIAS_ROOTS that ``fullname`` lies under, or None."""
  for root in ALIAS_ROOTS:
    if fullname == root or fullname.startswith(root + '.'):
      return root
  return None


def legacy_root(fullname):
  """The legacy root ('flax.nn' ...) that ``fullname`` lies under, or None."""
  for root in LEGACY_ROOTS:
    if fullname == root or fullname.startswith(root + '.'):
      return root
  return None


def coverage_message(fullname):
  """Text for an ImportError about a legacy path flaxlegacy does not serve."""
  return (
      f'flaxlegacy does not provide the legacy module {fullname!r}. '
      'Its coverage of the legacy Flax API (flax.nn, flax.optim, '
      'flax.deprecated.nn, v0.1.0rc2-v0.3.6) is listed in docs/coverage.md; '
      '`flaxlegacy check PATH` reports every legacy name a codebase uses '
      'and whether it is supported.')
