"""Which Kubernetes releases kubesmith supports, and what each accepts."""
