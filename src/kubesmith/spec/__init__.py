"""Spec: the cluster file, parsed and validated, with every mistake located."""
