"""Placement configs that are valid but measured to lose to Best-Fit: one-line warnings,
each with the measurement and a link to the explanation."""

from typing import List

from pipelines.stages.placement.specs import LifetimeSpec, policy_names

DOCS = "docs/stages/placement.md#known-bad-combinations"
# Policies that rank hosts by predicted exit times, fed LA's one-shot classes (two values):
# empty hosts vs Best-Fit measured on configs/azure_placement.textproto and
# configs/google_2011_placement.textproto (docs/reproduce/Ling25.md).
ONE_SHOT_LOSSES = {
    "nilas": "-21.1 pp on the Azure sample (5.5 % of hosts empty where Best-Fit keeps "
             "26.6 %), -3.9 pp on the Google 2011 tasks",
    "lava": "+0.2 pp on the Azure sample, -0.7 pp on the Google 2011 tasks",
    "lava_strict_recycling": "-9.6 pp with 106 failed placements on the Azure sample",
}
# The noisy-oracle accuracy at or below which a policy's mean gain over Best-Fit in the
# Azure sweep (configs/azure_noisy_seeds.textproto, 5 seeds; docs/reproduce/Ling25ext.md)
# is about zero or below, and what was measured.
NOISY_BREAK_EVEN = {
    "la": (0.8, "-0.50 pp at accuracy 0.6, -0.01 pp at 0.8"),
    "lava": (0.6, "+0.06 pp at accuracy 0.6, one seed of five at -0.12 pp"),
}


def compared(config) -> bool:
    """Whether a PlacementConfig replays best_fit too, so that its table shows each warned
    combination beside the baseline it loses to (a comparison, as the reproductions make)."""
    return "best_fit" in policy_names(config)


def warnings(config) -> List[str]:
    """One line per known-bad (policy, lifetime source) of a PlacementConfig. A sweep (the
    oracle and two or more noisy accuracies) asks how a policy degrades, so its low
    accuracies are not warned about."""
    names = set(policy_names(config))
    sources = [LifetimeSpec.of(message) for message in config.lifetime_source]
    found = []
    if any(source.kind == "one_shot_model" for source in sources):
        found += [f"placement: {name} with lifetime_source one_shot_model (LA's two classes) "
                  f"loses to Best-Fit: {ONE_SHOT_LOSSES[name]} ({DOCS})"
                  for name in sorted(names & set(ONE_SHOT_LOSSES))]
    accuracies = sorted({s.accuracy for s in sources if s.kind == "noisy_oracle"})
    if any(s.kind == "oracle" for s in sources) and len(accuracies) >= 2:
        return found
    for name in sorted(names & set(NOISY_BREAK_EVEN)):
        limit, measured = NOISY_BREAK_EVEN[name]
        low = [a for a in accuracies if a <= limit]
        if low:
            found.append(f"placement: {name} with noisy_oracle_accuracy "
                         f"{', '.join(f'{a:g}' for a in low)}: at accuracy <= {limit:g} it "
                         f"gains nothing over Best-Fit ({measured}; {DOCS})")
    return found
