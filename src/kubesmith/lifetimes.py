"""The longest lives kubesmith gives what it issues: read by the spec's checks, the CLI's options and the
token store, so that one bound holds wherever a lifetime is set (and no light command loads the spec's
model to know it)."""

from __future__ import annotations

TOKEN_MAX_DAYS = 365  # a join token lives a year at most (kubeadm's default: a day)
SERVICE_VALIDITY_MAX_DAYS = 3650  # the CA service issues for ten years at most
