"""On every node, before pods run: its pod network brought up and its images loaded into containerd;
after a foreground run (`kubesmith run`), what the stopped node left on the machine undone."""
