"""Applying a plan to one host, decided purely: desired state (desired.py), diff against what is
observed (diff.py), restart policy (restart.py), the VRAM watchdog's rule and the commands that
launch a replica. Import each from its module: `gpuplex validate` needs desired.py alone, and
loading this package loads nothing else."""
