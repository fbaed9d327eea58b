"""How kubesmith reaches hosts: run commands, upload files atomically, read file hashes."""
