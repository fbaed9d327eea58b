"""On every node, before pods run: its pod network brought up and its images loaded into containerd."""
