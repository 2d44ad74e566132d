"""The spec the DCGM fixtures were written for: each fixture pod sits where the planner places its
replica on gpu-node-1 (the unit tests check this), so a roll-up finds each GPU's model."""

SPEC_YAML = """\
version: 1
kubernetes:
  namespace_prefix: tenant-
fleet:
  nodes:
    - name: gpu-node-1
      gpus:
        - {model: H100-80GB, count: 4}
tenants:
  - name: acme
    isolation: dedicated
    workloads:
      - name: train
        kind: batch
        gpu: {count: 1}
        replicas: 2
  - name: globex
    isolation: mig
    workloads:
      - name: chat
        gpu: {mig_profile: 3g.40gb}
        serve: {model: globex-chat, port: 8000}
      - name: chat-large
        gpu: {mig_profile: 4g.40gb}
        serve: {model: globex-chat-large, port: 8001}
  - name: initech
    isolation: timeslice
    workloads:
      - name: playground
        gpu: {memory_gib: 16}
        replicas: 2
        serve: {model: initech-play, port: 8040}
"""
