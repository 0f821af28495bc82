"""What the tests (tests/) and the benchmarks (scripts/bench_*.py) compare fleetcast against.

reference/          simple, slow implementations of the fast paths (the as-of join, the peak
                    oracle and predictors, the placement replay, the shaping step, the
                    customer history): a test requires the fast path to give their answers;
                    a benchmark reports its speed against theirs
timing              CPU timing of the benchmarks
shaping_workloads   random shaping workloads
azure_samples       the real Azure V1 samples in ../shared/data, loaded as canonical instances

fleetcast itself imports nothing from here. Installed with the package (setup.py) so that
`import fleetcast_testing` works from anywhere; its sample paths are relative to the checkout,
so install in editable mode (`pip install -e ".[test]"`).
"""
