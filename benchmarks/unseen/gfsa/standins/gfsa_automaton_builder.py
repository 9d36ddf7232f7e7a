"""Stand-in for gfsa/automaton_builder.py (ours, not gfsa's).

The real module builds the GFSA automaton from a graph schema (it needs the
whole AST-graph machinery).  edge_supervision_models.py imports it for the
automaton model, which the driver does not build; only the graph metadata
type is used here.
"""
import dataclasses
from typing import Any

from gfsa import jax_util


@jax_util.register_dataclass_pytree
@dataclasses.dataclass
class EncodedGraphMetadata:
  num_nodes: Any
  num_input_tagged_nodes: Any


class AutomatonBuilder:

  def __init__(self, *args, **kwargs):
    raise NotImplementedError('stand-in: the automaton is not built here')
