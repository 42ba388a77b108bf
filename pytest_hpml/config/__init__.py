"""Layer 1, configuration: the --hpml-* options, hpml_* ini keys and HPML_* variables, the markers'
arguments, and the role this process plays (controller, xdist worker, rerun, rank).

Imports nothing else of pytest-hpml: every other layer may read it."""
