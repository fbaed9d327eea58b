"""Plan: the evaluated desired state of every host, as plain immutable data."""
