"""`gpuplex bench isolation`: the same GPU workload, several copies on one GPU, under each isolation
pattern gpuplex runs (exclusive, time-slicing, MPS with equal and unequal thread shares), launched
through the host runtime; per-tenant throughput and latency, aggregate against exclusive use, and a
steady tenant's p99 beside a heavy neighbour."""
