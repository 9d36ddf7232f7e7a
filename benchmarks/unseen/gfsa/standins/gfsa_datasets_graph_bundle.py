"""Stand-in for gfsa/datasets/graph_bundle.py (ours, not gfsa's).

The real ``GraphBundle`` is a pytree dataclass of an encoded automaton
graph, its metadata, node types and edges (a SparseCoordOperator from edge
types to node pairs); built here with the fields BaselineModel reads.
"""
import dataclasses
from typing import Any

from gfsa import jax_util


@jax_util.register_dataclass_pytree
@dataclasses.dataclass
class GraphBundle:
  automaton_graph: Any
  graph_metadata: Any
  node_types: Any
  edges: Any
