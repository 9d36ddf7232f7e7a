"""The parts of the value facts (flow.py), one module per concern.

``flow.py`` composes ``Flow`` from the mixins here (``defs``, ``names``,
``expressions``, ``calls``, ``gin``) and re-exports what rules read; the
modules here import only ``shared.py`` (and ``queries.py``) of their
package, never flow.py and never a rule.  See the docstring of flow.py.
"""
