"""Kubernetes target: render the spec and plan as Kubernetes objects (pure), apply them through the
official client (apply.py, the only module that imports `kubernetes`)."""
