"""`fleetcast reproduce PAPER`: runs a paper's configs and writes docs/reproduce/<key>.md.

For each claim of the paper that fleetcast checks, the page shows the paper's number (and
where the paper states it), fleetcast's number from this run's tables, the data it ran on,
the rule that compares the two and the verdict it computes (claims.py); then the figures
and the tables the claims come from. A page replaces only the page, figures and index that
fleetcast wrote (their markers say so; pipelines/io/owned_files.py). Modules:

    claims.py      Claim, Rule (the verdict rules), Sql / Computed measures, Spread (one
                   measure over a config's splits), verdicts
    runs.py        RunSpec (a config and its --quick shrinking), split_variants (the
                   config at other split times) and Runs (run each once)
    paper.py       Paper: a paper's key, reference, runs, claims, figures and tables
    page.py        the page of a paper and docs/reproduce/index.md
    registry.py    PAPERS by key, and `reproduce(key, quick, output_dir, docs_dir)`
    placement.py   the runs and placement-replay claims the lifetime papers share
    lava_limits.py LAVA replayed with its classes and exits from different sources
    ling25.py, ling25ext.py, pace18.py, barbalho23.py, bashir21.py: one module per paper
"""

# The papers' keys (docs' references page), in page order; registry.PAPERS holds them.
KEYS = ("Ling25", "Ling25ext", "Pace18", "Barbalho23", "Bashir21")
