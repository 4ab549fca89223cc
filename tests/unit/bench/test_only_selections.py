"""`make bench`'s `--only` selections name steps the full run has: a misspelt key would run
nothing for it, silently."""

from bench.run import ONLY, Bench


def test_every_selection_names_steps_of_the_run() -> None:
    keys = [key for key, _, _ in Bench.steps(Bench.__new__(Bench))]
    assert len(keys) == len(set(keys))
    for name, selected in ONLY.items():
        assert selected <= set(keys), name
    assert ONLY["all"] >= ONLY["ingest"] | ONLY["perf"] - {"seed_p3"}
