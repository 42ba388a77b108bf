"""Assertion helpers for users' tests (optimizer equivalence, pruning that shrinks). They use the
bench layer's counters; nothing of the plugin imports them."""
