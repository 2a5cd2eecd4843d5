"""Where an evaluation runs: the Executor protocol, the registry by kind, this process (local)
or a Ray cluster (ray_driver/ray_worker, the cluster extra).
"""
