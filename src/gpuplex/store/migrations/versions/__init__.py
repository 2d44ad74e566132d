"""One module per schema revision, oldest first: r0001 (issue 4), r0002 (the control plane),
r0003 (retention of raw GPU samples),
r0004 (budgets that enforce, per-key usage roll-ups), r0005 (latency in usage records),
r0006 (jobs and their events)."""
