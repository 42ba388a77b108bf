"""Layer 3, benchmarks: the benchmark fixture, how rounds are measured, the metrics they give, and
the fresh processes a benchmark is measured again in."""
