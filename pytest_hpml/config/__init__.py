"""Layer 1, configuration: the --hpml-* options, hpml_* ini keys and HPML_* variables, the markers'
arguments, the role this process plays (controller, xdist worker, rerun, rank), and the progress
lines the process that reports shows while the long work after the tests runs.

Imports nothing else of pytest-hpml: every other layer may read it."""
