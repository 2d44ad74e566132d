"""One GPU server: GPU drivers (NVML, simulated), MIG, MPS, cgroups, launcher, supervisor, VRAM watchdog, reconcile loop."""
