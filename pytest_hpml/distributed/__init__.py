"""Layer 3, distributed tests: tests marked ``@pytest.mark.distributed`` run in ``world_size``
real ranks, spawned by pytest-hpml or launched by torchrun, mpirun or srun, their reports merged
into one, and GPUs leased across xdist workers."""
