"""Whether a codebase drives a legacy attention Cache (a fact of its
sources, read by rules/attention_cache.py through ``codebase.
attention_cache``; api._analyse records it).

True when some file that uses legacy flax.nn builds a legacy
``attention.Cache`` (or imports ``Cache`` from ``flax.nn.attention``) and
no file builds an ``nn.Collection`` of its own: then a ``.mutate()``
block, an ``.initialize_cache`` call, a module parameter with ``store`` /
``retrieve`` can only be the cache.
"""

import re

# a legacy Cache built somewhere in the codebase
_CACHE_BUILT = re.compile(
    r'\battention\s*\.\s*Cache\s*\(|'
    r'from\s+flax\s*\.\s*nn\s*\.\s*attention\s+import\s+[^\n]*\bCache\b')
# a legacy nn.Collection of the codebase's own (other store/retrieve users)
_COLLECTION_BUILT = re.compile(r'\bCollection\s*\(')


def codebase_fact(codes):
  """True when the codebase (``codes``: each file's source) builds a legacy
  attention Cache and no nn.Collection of its own."""
  built = False
  for code in codes:
    if code is None:
      continue
    if _COLLECTION_BUILT.search(code):
      return False
    if not built and _CACHE_BUILT.search(code):
      built = True
  return built
