"""Suite-wide test configuration that must not import Django (the unit suite runs `-p no:django`).

Hypothesis profiles: `ci` is fixed (derandomized, no deadline, bounded examples) so a CI run is
reproducible on a noisy 2-core machine; `dev` explores more. `CI=true` selects `ci`; the
`HYPOTHESIS_PROFILE` variable overrides either.
"""

import os

from hypothesis import HealthCheck, Phase, settings

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=150,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, max_examples=200)
# `make mutate`: every mutant is judged on the same few examples (derandomized), so a score is
# reproducible and a mutant costs seconds; the explicit boundary examples do the fine work. No
# shrinking: the first failing example already kills the mutant, and minimising it could cost
# more CPU than the mutant's time limit (reported as a timeout instead of a kill).
settings.register_profile(
    "mutate",
    derandomize=True,
    deadline=None,
    max_examples=40,
    database=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") == "true" else "dev")
)
