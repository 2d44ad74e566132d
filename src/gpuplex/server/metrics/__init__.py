"""The control plane's `/metrics`: the endpoint and who may read it, the collector that reads the
applied plan, the newest GPU samples, the roll-ups and budgets at scrape time, and the bounded
labels and metric families it reports (the names are listed in docs/operations.md, Metrics)."""
