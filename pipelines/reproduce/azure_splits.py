"""The Azure lifetime run (configs/azure_lifetime.textproto, trained on the first 60 % of
the arrivals) also trained on the first 50 % and 70 %: a claim on its models is measured at
each training fraction and holds only where it holds at all three."""

import dataclasses
from typing import Callable

from pipelines.reproduce.claims import Spread
from pipelines.reproduce.placement import LIFETIME_RUN

FRACTIONS = (0.5, 0.7)


def _at_fraction(fraction: float):
    def edit(config):
        config.lifetime_model.train_fraction = fraction
    return dataclasses.replace(
        LIFETIME_RUN, quick_skip="--quick runs the config's own training fraction only",
        variant=(f"_train{fraction:g}", f"train_fraction {fraction:g}", edit))


LIFETIME_RUNS = (LIFETIME_RUN, *(_at_fraction(fraction) for fraction in FRACTIONS))


def fraction_label(config) -> str:
    """"trained on 60 %": the share of the arrivals the config trains on."""
    return f"trained on {config.lifetime_model.train_fraction * 100:g} %"


def over_fractions(build: Callable[[str], object]) -> Spread:
    """`build(config name)`'s measure over LIFETIME_RUNS, reproduced only where it holds at
    every training fraction."""
    return Spread(tuple(spec.name for spec in LIFETIME_RUNS), build, fraction_label,
                  "training fraction")
