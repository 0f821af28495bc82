"""Shaping policies, one file each, on the shared base class in base.py: `baseline`
(allocation = request), `optimistic` (forecast + beta, no proactive preemption) and
`pessimistic` ([Pace18] Algorithm 1)."""
