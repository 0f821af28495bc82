"""Noisy-oracle lifetimes for accuracy sweeps ([Ling25ext] App. G.1).

Every VM is drawn once into "correctly predicted" (probability = accuracy) or "mispredicted";
its prediction is the true value with Gaussian noise added in the log10 domain, sigma 0.001
for the first group and 3 for the second, and the result is capped to [0, 14 days].

The draw is per VM and fixed by the seed, so a VM keeps its error when it is repredicted
(the placement replay applies the same log10 error to the true *remaining* lifetime at every
uptime, which is the label the uptime-augmented model predicts).
"""

import numpy as np

CORRECT_SIGMA_LOG10 = 0.001
WRONG_SIGMA_LOG10 = 3.0
CAP_S = 14 * 86400.0
# log10 of 0 is -inf: a true lifetime below one second is perturbed as one second.
MIN_LIFETIME_S = 1.0


class NoisyOracle:
    """Seeded noisy-oracle lifetimes.

    Args:
      accuracy: probability in [0, 1] that a VM's prediction is (almost) exact.
      seed: seed of the per-VM draws; the same seed gives the same errors.
      correct_sigma_log10, wrong_sigma_log10: noise of the two groups (log10 seconds).
      cap_s: upper cap of a prediction in seconds (the lower cap is 0).
    """

    def __init__(self, accuracy: float, seed: int = 0,
                 correct_sigma_log10: float = CORRECT_SIGMA_LOG10,
                 wrong_sigma_log10: float = WRONG_SIGMA_LOG10, cap_s: float = CAP_S):
        if not 0.0 <= accuracy <= 1.0:
            raise ValueError(f"accuracy must be in [0, 1], got {accuracy}")
        self.accuracy = accuracy
        self.seed = seed
        self.correct_sigma_log10 = correct_sigma_log10
        self.wrong_sigma_log10 = wrong_sigma_log10
        self.cap_s = cap_s

    def log10_errors(self, num_vms: int) -> np.ndarray:
        """The per-VM error added to log10 lifetimes: float64[num_vms]."""
        rng = np.random.default_rng(self.seed)
        correct = rng.random(num_vms) < self.accuracy
        sigma = np.where(correct, self.correct_sigma_log10, self.wrong_sigma_log10)
        return rng.standard_normal(num_vms) * sigma

    def scale(self, lifetime_s: np.ndarray, factor: np.ndarray) -> np.ndarray:
        """`lifetime_s` (float64[K], seconds) times `factor` (float64[K], 10 ** the log10
        error), capped: a new array."""
        # Adding the error to the log10 lifetime, as a product: the placement replay calls
        # this once per reprediction batch, with the factors computed once per VM.
        noisy = np.maximum(lifetime_s, MIN_LIFETIME_S)
        noisy *= factor
        # A product with a power of 10 is never below the lower cap 0, so only the upper
        # cap applies; np.minimum costs less per call than np.clip.
        return np.minimum(noisy, self.cap_s, out=noisy)

    def apply(self, lifetime_s: np.ndarray, log10_error: np.ndarray) -> np.ndarray:
        """Perturbs `lifetime_s` (float64[K], seconds) by `log10_error` (float64[K]) and caps."""
        return self.scale(lifetime_s, 10.0 ** log10_error)

    def predict(self, lifetime_s: np.ndarray) -> np.ndarray:
        """Noisy lifetimes (seconds) of true lifetimes `lifetime_s` float64[V] (VM i: draw i)."""
        lifetime_s = np.asarray(lifetime_s, dtype=np.float64)
        return self.apply(lifetime_s, self.log10_errors(len(lifetime_s)))
