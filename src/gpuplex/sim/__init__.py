"""Stand-ins for the world in tests and demos, run as processes or served: a tenant workload, an MPS
control daemon, the simulated OpenAI-compatible model server. (The trace replay of `gpuplex
simulate` is gpuplex.replay.)"""
