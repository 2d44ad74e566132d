"""Prometheus metric definitions and logging setup."""
