"""`gpuplex up`: the whole system on one server — control plane, gateway and host runtime — on the
real GPUs when NVML finds any, else on simulated GPUs with simulated model servers."""
