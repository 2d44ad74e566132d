"""The one queue model: the spec's `queues:` as a tree (organisation -> team -> tenant), the
admission rules every path decides by (the job runner, the replay, the what-if of `gpuplex
queues`, the Kueue render's semantics), preemption, fair share over time, and where each queue
stands (docs/quotas.md). Pure."""
