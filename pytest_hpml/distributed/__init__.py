"""Layer 3, distributed tests: tests marked ``@pytest.mark.distributed`` run in ``world_size``
real ranks, spawned by pytest-hpml (:mod:`.spawn`) or launched by torchrun, mpirun or srun
(:mod:`.rank`); what a test asks for (:mod:`.spec`), the rank processes (:mod:`.processes`), the
ranks' reports merged into one (:mod:`.reports`), and GPUs leased across xdist workers
(:mod:`.leases`)."""
