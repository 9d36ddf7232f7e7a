"""Ports by hand, in an upgraded long-range-arena tree, the lines the
upgrade left at a TODO that stop the encoders from importing or running.

Usage: python hand_port.py UPGRADED_DIR   (the dir holding lra_benchmarks)

Each replacement is checked to apply exactly once (a changed upgrade shows
as an error here, not as a silent no-op).  What is ported:

* the decoding cache's classes (``Cache``, ``_CacheEntry``), imported from
  legacy attention by synthesizer, local and sinkhorn attention and used
  only under ``if cache:`` (decoding; the encoders pass no cache): empty
  stand-in classes;
* ``make_rng`` imported from ``flax.deprecated.nn.stochastic``, called by
  their attention functions only with attention dropout and no
  ``dropout_rng``: a stand-in that raises (the upgraded run has no dropout:
  LRA_DROPOUT=0);
* bigbird's ``from flax.deprecated.nn import attention``: a namespace of
  the shipped mask builders and the two stand-in classes;
* reformer's ``jax.custom_transforms`` + ``jax.defvjp_all`` (a gather /
  sort whose custom gradient is the permutation's own): the plain
  function (JAX's gradient of a permutation: the same numbers);
* transformer_tlb's ``jax.lax.scan`` over chunks whose body calls shared
  submodules: a Python loop over the chunks (linen's ``nn.scan`` would do
  it without unrolling).
"""
import os
import sys

CACHE_STANDINS = {
    'from flax.deprecated.nn.attention import _CacheEntry\n':
        'class _CacheEntry:  # hand port: decoding cache, unused here\n'
        '  pass\n',
    'from flax.deprecated.nn.attention import Cache\n':
        'class Cache:  # hand port: decoding cache, unused here\n'
        '  pass\n',
    'from flax.deprecated.nn.stochastic import make_rng\n':
        'def make_rng():  # hand port: legacy implicit dropout key\n'
        "  raise NotImplementedError('attention dropout needs a key: port "
        "make_rng by hand')\n",
}

PORTS = {
    'models/synthesizer/synthesizer_attention.py': CACHE_STANDINS,
    'models/local/local_attention.py': CACHE_STANDINS,
    'models/sinkhorn_transformer/sinkhorn_attention.py': CACHE_STANDINS,
    'models/bigbird/bigbird_attention.py': {
        'from flax.deprecated.nn import attention\n':
            'import types  # hand port: legacy attention internals\n'
            'from lra_benchmarks import legacy_helpers as _lh\n'
            'attention = types.SimpleNamespace(\n'
            "    Cache=type('Cache', (), {}),\n"
            "    _CacheEntry=type('_CacheEntry', (), {}),\n"
            '    make_padding_mask=_lh.legacy_make_padding_mask,\n'
            '    _make_causal_mask=_lh.legacy_make_causal_mask)\n',
    },
    'models/reformer/reformer_attention.py': {
        '  permute = jax.custom_transforms(permute_impl)\n':
            '  permute = permute_impl  # hand port: JAX differentiates it\n',
        '  jax.defvjp_all(permute, permute_vjp)\n': '',
    },
    'models/transformer_tlb/transformer_tlb.py': {
        '    cur_state, _ = jax.lax.scan(scan_inner, init_state, x_with_pad, '
        'unroll=40)\n':
            '    cur_state = init_state  # hand port: the scan as a loop\n'
            '    for chunk in range(x_with_pad.shape[0]):\n'
            '      cur_state, _ = scan_inner(cur_state, x_with_pad[chunk])\n',
    },
}

# reformer has two such functions
COUNTS = {('models/reformer/reformer_attention.py', k): 2
          for k in PORTS['models/reformer/reformer_attention.py']}


def main(root):
  for rel, subs in PORTS.items():
    path = os.path.join(root, 'lra_benchmarks', rel)
    with open(path) as f:
      text = f.read()
    for old, new in subs.items():
      want = COUNTS.get((rel, old), 1)
      got = text.count(old)
      if got != want:
        raise SystemExit(f'{rel}: {old.strip()!r} found {got} times, '
                         f'expected {want}')
      text = text.replace(old, new)
    with open(path, 'w') as f:
      f.write(text)
    print('ported', rel)


if __name__ == '__main__':
  main(sys.argv[1])
