"""kubesmith: one declarative file to a running, secure Kubernetes cluster."""

__version__ = "0.1.0"
