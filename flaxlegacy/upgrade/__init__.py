"""``flaxlegacy upgrade``: rewrite legacy ``flax.nn`` modules as linen source.

Built on libcst (a concrete syntax tree: comments and formatting survive).
Three passes over a codebase:

1. facts (facts.py): legacy ``nn`` aliases, legacy module classes and their
   field / call split, helpers returning ``X.partial``, ``init_by_shape``
   input shapes -- over every file first, so a module defined in one file is
   rewritten correctly where another file calls it;
2. rules (rules/): one module per legacy concept, driven by transform.py
   (the modules import each other in layers, without circles: cst_util.py);
3. report (report.py): ``upgrade.json`` and a printed summary; optionally
   numeric verification (verify.py) of every rewritten module class.

``upgrade_source(code)`` rewrites one source string (tests, tools);
``upgrade_paths(...)`` is what the command runs.
"""

from flaxlegacy.upgrade.api import upgrade_paths
from flaxlegacy.upgrade.api import upgrade_source

__all__ = ['upgrade_paths', 'upgrade_source']
