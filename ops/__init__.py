"""What an operator runs around the services: the supervisor (`airlock up`), verify, swarm,
Kubernetes, pins and the lab's init. No service imports it."""
