"""Public key infrastructure: the declarative certificate list, and issuing from the plan's requests."""
