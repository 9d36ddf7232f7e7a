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
