"""``bide torture``: the options, and a lazy hand-off to the harness beside the tests.

The torture harness (fork helpers, workloads, the hostile corpus) is test
infrastructure: it lives in ``tests/torture/harness/`` and ships in no wheel.
This entry imports it only when the command runs, so ``bide`` starts without
it and an installed bide says plainly that torture runs from a source checkout.
"""

from __future__ import annotations

from pathlib import Path

import click

HARNESS = "bide.tests.torture.harness.torture"
NETWORK = "bide.tests.torture.harness.network"  # --network: PostgreSQL behind faulty links


def load_harness(name: str = HARNESS) -> object:
    """The harness module, or a ClickException when this bide is not a source checkout."""
    import importlib

    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name is None or not name.startswith(e.name):
            raise
        raise click.ClickException(
            "bide torture runs from a source checkout (it needs tests/torture/harness/, "
            "which an installed bide does not ship): clone bide, `pip install -e .`, "
            "then run `bide torture` again.") from None


@click.command("torture")
@click.option("--trials", type=click.IntRange(min=0), default=None,
              help="Random kill trials [default 450; --nightly 75,000].")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the random kill moments (printed with any failure).")
@click.option("--occurrences", type=click.IntRange(min=0), default=None,
              help="Crash at occurrences 1..K of each fault point; 0 = every occurrence "
                   "[default 12; --nightly 0].")
@click.option("--repeat", type=click.IntRange(min=1), default=None,
              help="Run the matrix this many times [default 1; --nightly 60].")
@click.option("--nightly", is_flag=True, help="The nightly size: at least 100,000 crashes.")
@click.option("--jobs", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--dir", "base", type=click.Path(file_okay=False, path_type=Path),
              help="Where trials run (default: /dev/shm when it exists, else a temporary "
                   "directory).")
@click.option("--network", "passes", type=click.IntRange(min=1), default=None,
              metavar="PASSES",
              help="Instead: PASSES passes of the PostgreSQL network-fault scenarios "
                   "(partitions, cuts, lost COMMIT replies, latency, server restarts and "
                   "crashes, clock skew) on a throwaway cluster.")
def torture(trials: int | None, seed: int, occurrences: int | None, repeat: int | None,
            nightly: bool, jobs: int, base: Path | None, passes: int | None) -> None:
    """Crash bide at every fault point and at random moments; print the counts."""
    if passes is not None:
        network = load_harness(NETWORK)
        raise SystemExit(network.main(passes=passes, base=base,  # type: ignore[attr-defined]
                                      seed=seed))
    harness = load_harness()
    raise SystemExit(harness.main(trials=trials, seed=seed,  # type: ignore[attr-defined]
                                  occurrences=occurrences, repeat=repeat, nightly=nightly,
                                  jobs=jobs, base=base))
