"""Time units shared by every fleetcast module.

Trace times are integer microseconds from the trace start (the Google v3 convention); config
fields and model inputs ending in `_s` are seconds.
"""

US_PER_S = 1_000_000
MINUTE_S = 60
HOUR_S = 3600
DAY_S = 86_400
HOUR_US = HOUR_S * US_PER_S
DAY_US = DAY_S * US_PER_S
