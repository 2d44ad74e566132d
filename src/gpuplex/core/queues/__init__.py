"""Hierarchical GPU queues (organisation -> team -> tenant) with weighted dominant resource fairness:
guarantees, limits, fair shares and reclaim, the queue file of `gpuplex queues`, and why a workload
is pending (docs/quotas.md). Pure."""
