"""The legacy layer table: legacy layer calls -> linen construction + call.

``nn.Dense(x, 10, name='fc')`` -> ``nn.Dense(10, name='fc')(x)``.  Each
legacy layer lists its ``apply`` parameters after the input (the order of
positional arguments), the keyword renames to linen, and the arguments the
rewrite must add so linen computes the legacy numbers (spec legacy-nn.md §4).
"""

import collections

Layer = collections.namedtuple(
    'Layer', 'legacy linen params renames linen_fields add_kwargs note')

_COMMON_RENAMES = {'bias': 'use_bias', 'scale': 'use_scale'}

# legacy name -> Layer.  ``params``: legacy apply parameters after the input
# (positional order); ``linen_fields``: linen's dataclass field order (a
# positional argument stays positional only where both orders agree).
LAYERS = {
    'Dense': Layer('Dense', 'Dense',
                   ('features', 'bias', 'dtype', 'precision', 'kernel_init',
                    'bias_init'), _COMMON_RENAMES,
                   ('features', 'use_bias', 'dtype', 'param_dtype'), {}, None),
    'DenseGeneral': Layer(
        'DenseGeneral', 'DenseGeneral',
        ('features', 'axis', 'batch_dims', 'bias', 'dtype', 'kernel_init',
         'bias_init', 'precision'), _COMMON_RENAMES,
        ('features', 'axis', 'batch_dims', 'use_bias'), {}, None),
    'Conv': Layer(
        'Conv', 'Conv',
        ('features', 'kernel_size', 'strides', 'padding', 'input_dilation',
         'kernel_dilation', 'feature_group_count', 'bias', 'dtype',
         'precision', 'kernel_init', 'bias_init'), _COMMON_RENAMES,
        ('features', 'kernel_size', 'strides', 'padding', 'input_dilation',
         'kernel_dilation', 'feature_group_count', 'use_bias'), {}, None),
    'ConvTranspose': Layer(
        'ConvTranspose', 'ConvTranspose',
        ('features', 'kernel_size', 'strides', 'padding', 'kernel_dilation',
         'bias', 'dtype', 'precision', 'kernel_init', 'bias_init'),
        _COMMON_RENAMES,
        ('features', 'kernel_size', 'strides', 'padding', 'kernel_dilation',
         'use_bias'), {}, None),
    'Embed': Layer(
        'Embed', 'Embed', ('num_embeddings', 'features', 'embedding_init'),
        {}, ('num_embeddings', 'features'), {},
        'out-of-range indices: legacy clamps, linen gives NaN'),
    # Legacy BatchNorm trains by default; linen's use_running_average has no
    # default.  Linen clips a negative E[x^2]-E[x]^2 at 0 where legacy
    # returns NaN (degenerate inputs only).
    'BatchNorm': Layer(
        'BatchNorm', 'BatchNorm',
        ('batch_stats', 'use_running_average', 'axis', 'momentum', 'epsilon',
         'dtype', 'bias', 'scale', 'bias_init', 'scale_init', 'axis_name',
         'axis_index_groups'), _COMMON_RENAMES, (),
        {'use_running_average': 'False'},
        'linen clips a negative variance estimate at 0 (legacy: NaN)'),
    'LayerNorm': Layer(
        'LayerNorm', 'LayerNorm',
        ('epsilon', 'dtype', 'bias', 'scale', 'bias_init', 'scale_init'),
        _COMMON_RENAMES, ('epsilon',), {}, None),
    # legacy parameters have the input's rank, (1, ..., 1, C); linen's
    # GroupNorm stores (C,): flaxlegacy ships a linen GroupNorm with the
    # legacy shapes (SHIPPED)
    'GroupNorm': Layer(
        'GroupNorm', 'upgraded_layers.GroupNorm',
        ('num_groups', 'group_size', 'epsilon', 'dtype', 'bias', 'scale',
         'bias_init', 'scale_init'), _COMMON_RENAMES,
        ('num_groups', 'group_size', 'epsilon', 'dtype', 'use_bias',
         'use_scale'), {}, None),
}

# legacy private helpers research code called -> the function flaxlegacy
# ships for them (flaxlegacy.migrate.upgraded_layers, plain jax)
LEGACY_HELPERS = {
    'linear._conv_dimension_numbers': 'conv_dimension_numbers',
    'normalization._absolute_dims': 'absolute_dims',
}

# legacy functions flaxlegacy ships with their legacy interface (plain JAX,
# importable with FLAXLEGACY=off): legacy attr -> the helper's full name,
# imported by name where the legacy function is referenced
LEGACY_FUNCTIONS = {
    'dot_product_attention': 'flaxlegacy.migrate.upgraded_attention.'
                             'legacy_dot_product_attention',
    'attention.dot_product_attention': 'flaxlegacy.migrate.'
                                       'upgraded_attention.'
                                       'legacy_dot_product_attention',
    # the mask builders of legacy attention (pure functions), called by
    # code that assembles its own attention module (long-range-arena)
    'attention.make_padding_mask': 'flaxlegacy.migrate.upgraded_attention.'
                                   'legacy_make_padding_mask',
    'attention._make_causal_mask': 'flaxlegacy.migrate.upgraded_attention.'
                                   'legacy_make_causal_mask',
}


# linen layers flaxlegacy ships for the rewrite (plain linen, importable with
# FLAXLEGACY=off): the constructor the rewrite writes -> its full name
SHIPPED = {
    'upgraded_layers.GroupNorm': 'flaxlegacy.migrate.upgraded_layers.GroupNorm',
}

# Legacy parameters a rewrite cannot carry over (the call keeps a TODO).
UNSUPPORTED_ARGS = {
    ('BatchNorm', 'batch_stats'): 'explicit batch_stats collections have no '
                                  'linen argument (use the batch_stats '
                                  'collection)',
}

# Layers whose linen version computes or stores differently with no argument
# to restore legacy: left as they are with a TODO.
UNSUPPORTED_LAYERS = {
    'MultiHeadDotProductAttention': 'attention axes, masks and cache '
                                    'conventions differ (spec §4 15-17)',
    'SelfAttention': 'attention axes, masks and cache conventions differ '
                     '(spec §4 15-17)',
    'dot_product_attention': 'positional order and mask conventions differ '
                             '(spec §4 16-17)',
    'LSTMCell': 'linen cells take features as a field and a different '
                'initialize_carry',
    'OptimizedLSTMCell': 'linen cells take features as a field and a '
                         'different initialize_carry',
    'GRUCell': 'linen cells take features as a field and a different '
               'initialize_carry',
    'ConvLSTM': 'linen ConvLSTMCell differs in signature',
    'Model': 'nn.Model is program-level: the upgrade rewrites it where a '
             'program builds and calls its model, not here',
    'Collection': 'nn.Collection state is program-level: the upgrade '
                  'rewrites it where a program threads it through '
                  'nn.stateful, not here',
    'stateful': 'nn.stateful is program-level: apply(..., '
                "mutable=['batch_stats']), which the upgrade writes around "
                'model calls in program code, not here',
    'stochastic': "nn.stochastic is program-level: apply(..., rngs={'dropout':"
                  ' key}), which the upgrade writes around model calls in '
                  'program code, not here',
    'capture_module_outputs': 'use Module.sow / capture_intermediates',
    'module_method': 'module methods need a hand port (an ordinary method '
                     'of the linen module)',
    'normalize': 'jax.nn.standardize clips the variance (legacy does not)',
    'attention': 'legacy attention conventions differ (spec §4 15-17)',
    'recurrent': 'linen cells differ in signature',
    'base': 'legacy internals',
    'utils': 'legacy internals',
}


def linen_kwarg(layer, legacy_name):
  return layer.renames.get(legacy_name, legacy_name)
