"""Layer 4, verdicts: statistics, the judging of each metric against its baseline, and baseline
storage."""
