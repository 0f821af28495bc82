"""The simulated cluster: hosts (cluster.py), the FIFO application queue and first-fit
placement (scheduler.py), and the step loop that runs a workload under a shaping policy
(simulator.py)."""
