"""Stand-in for gfsa/py_ast_graphs.py (ours, not gfsa's).

The real module derives a graph schema from Python's AST; BaselineModel only
reads ``len(py_ast_graphs.BUILDER.node_types)``.
"""
import types

SCHEMA = None
BUILDER = types.SimpleNamespace(
    node_types=['Module', 'FunctionDef', 'Assign', 'Name', 'Call', 'Return',
                'BinOp'])
