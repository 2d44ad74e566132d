"""The control plane: REST API with RBAC, the dashboard, /metrics, and the reconcilers that roll up
usage and check budgets. Everything it decides is computed by gpuplex.core."""
