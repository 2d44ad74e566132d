"""Cluster trace replay, the analytics of `gpuplex simulate`: the openb trace read (`openb`), pods
placed one by one by a placement policy (`placement`, summed up over seeds in
`placement_report`), the same trace under each isolation mode (`isolation_compare`), and pods
replayed in time through the queue rules of a tenants file (`jobs`, `jobs_report`,
`tenants_file`). Nothing here starts a process or serves a socket."""
