"""What gpuplex measures and exposes that more than the control plane uses: the gateway's Prometheus
metrics, the metrics token that guards every `/metrics`, and the reader of dcgm-exporter's text."""
