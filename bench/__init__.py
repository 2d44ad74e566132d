"""Benchmarks: one script per benchmark, results in docs/benchmarks.md (house rule 8)."""
