"""Dynamic resource shaping ([Pace18] §III-B, Algorithm 1, §IV), without Beam.

A trace-driven cluster simulator: applications with core and elastic components queue FIFO
(priority first) and are admitted when their core components fit on the hosts'
allocations; a shaping policy resizes running components to forecast + beta every shaping
interval and preempts what no longer fits (pessimistic) or lets hosts overload and
components fail (optimistic).

    workload.py            Workload: applications, components, per-step usage (flat arrays)
    forecasters.py         oracle, ARIMA and GP forecasts of every component's usage ratio
                           (the models: predictors/peak/arima.py, predictors/peak/gp_forecaster.py)
    cluster/cluster.py     Cluster: host capacities
    cluster/scheduler.py   the FIFO application queue and first-fit placement
    cluster/simulator.py   simulate(): the step loop
    shapers/               the shaping policies: baseline, optimistic, pessimistic (one file
                           each, on base.py)
    metrics.py             turnaround, slack, failures, work lost; percentiles
    registry.py            the policy and forecaster registries
"""
