"""Health: readiness probes (`kubesmith wait`, gates, online units) and the cluster status built on them."""
