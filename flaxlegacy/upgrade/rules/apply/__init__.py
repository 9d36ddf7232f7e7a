"""A legacy module body's calls (rules/apply_rewriter.py), one module per
legacy concept.

Each module holds one mixin of ``apply_rewriter.ApplyRewriter`` -- its
cases of a call and the rewrites they make -- and imports no other module
of this package; apply_rewriter.py composes them and fixes the order in
which its one ``leave_Call`` tries their cases (``FIRST_CALL_CASES``,
``CALL_CASES``).  See the docstring of rules/apply_rewriter.py.
"""
