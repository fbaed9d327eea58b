"""Backends consume the plan: render writes host bundles; systemd, apply and run build on them."""
