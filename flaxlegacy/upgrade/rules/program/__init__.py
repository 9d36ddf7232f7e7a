"""The program pass (rules/programs.py), one module per legacy concept.

Each module holds one mixin of ``programs.ProgramRewriter`` -- its hooks,
its cases and their tables -- and imports only ``shared.py`` of this
package; programs.py composes them and fixes the order in which shared
hooks try their cases.  See the docstring of rules/programs.py.
"""
