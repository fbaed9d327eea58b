"""The cluster CA as a service: join tokens, the signing policy, the server (`ca serve`) and its client."""
