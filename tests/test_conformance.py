"""Legacy reference traces: flaxlegacy reproduces real legacy Flax numbers.

Each case names a generator program and the key prefixes of the arrays it
covers (see ../shared/reference/legacy/manifest.json).  Tolerance rtol 1e-4 /
atol 1e-6 (conformance README §3); the prng program must match exactly.
"""

import pytest

from tests import conformance

# (case id, program, key prefixes or None for all, rtol, atol)
CASES = [
    ('prng', 'prng', None, 0.0, 0.0),
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
