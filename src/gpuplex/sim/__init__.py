"""Stand-ins for the world in tests and demos: a tenant workload process, an MPS daemon."""
