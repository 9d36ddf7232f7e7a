"""Stand-in for gfsa/automaton_sampling.py (ours, not gfsa's)."""
