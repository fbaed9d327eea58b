"""Vocabulary: the words every rung above speaks. The spec's value types and located errors, and the
plan's data (host plans, facts, a host's environment, membership, history), with no I/O and no
knowledge of any component."""
