"""Shaping policies, one file each, on the shared base class in base.py: `baseline`
(allocation = request), `optimistic` (forecast + beta, no proactive preemption) and
`pessimistic` (002 Algorithm 1)."""
