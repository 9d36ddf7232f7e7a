"""Stand-in for gfsa/model/automaton_layer.py (ours, not gfsa's): the GFSA
layer needs automaton_builder; the driver does not build automaton_model."""
