"""A tiny fleet and pod trace for `gpuplex simulate --arrivals trace`, where only fgd-balanced
starts every pod: ten 4-GPU nodes, the first alone with the 128 cores alice's 4-GPU pod asks 120
of. bob's first pod opens a node; his second fits only the big node and leaves; his 1-GPU pods
arrive while both run (both nodes in use) and never leave; alice's 4-GPU pod comes last."""

from __future__ import annotations

NODES = "sn,cpu_milli,memory_mib,gpu,model\nbig,128000,262144,4,V100\n" + "".join(
    f"n{i},64000,262144,4,V100\n" for i in range(9)
)
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n"
    + "e0,1000,1024,1,1000,,LS,Running,0,,0\n"
    + "c0,100000,1024,1,1000,,LS,Running,1,5,1\n"
    + "".join(f"b{i},1000,1024,1,1000,,LS,Running,{i + 2},,{i + 2}\n" for i in range(3))
    + "a0,120000,1024,4,1000,,LS,Running,10,100,10\n"
)
