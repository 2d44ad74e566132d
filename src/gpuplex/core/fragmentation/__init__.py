"""GPU fragmentation against a workload's typical pods (FGD, Weng et al., ATC '23) and the scores
built on it: the one measure both the live planner (shares under `policy.placement: fragmentation`)
and the cluster trace replay (`fgd`, `fgd-balanced`) place by. Pure."""
