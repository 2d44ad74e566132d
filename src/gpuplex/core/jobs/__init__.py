"""Jobs: bursty work tenants submit at run time, held to the spec's queues. Pure decisions that
need both the plan and the queue rules (what the plan's replicas hold against the queues)."""
