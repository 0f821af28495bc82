"""Simple, slow reference implementations that the fast paths are tested and timed against:
join (the as-of join), peak (the peak oracle and predictors, step by step), placement_simulator
(the placement replay, scanning every host), shaping_simulator (the shaping step, one component
at a time)."""
