"""Layer 2, hardware: the devices torch sees, GPU slices per xdist worker, the machine
fingerprint, and the GPUs' peak FLOP/s.

Imports only :mod:`pytest_hpml.config`."""
