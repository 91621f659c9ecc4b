"""Issue 36's fault scenarios, run for a while: every scenario of ``trocket.chaos.scenarios``
in rounds, each run on a fresh lab (network namespaces, real etcd, controllers, NameServer and
replicas), one line per run with the checker's counts and the scenario's figures.

    ./run bench chaos [--minutes 30] [--seed N] [--only S2 S9 ...] [--no-unsafe]

The seeds of a session come from ``--seed`` (printed), so ``--seed N --only S4`` replays the
runs of S4 that session made. Runs of deployments documented as safe must show zero in every
safety count (the exit status says whether they did); the deployments documented as unsafe
(async flush with the SyncStateSet shrunk to the master and no ``min_in_sync_replicas``) print
their measured loss and fail nothing. Needs root (network namespaces, loop devices), nft and
libfaketime, as the tests do.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trocket.chaos import netlab  # noqa: E402
from trocket.chaos.scenarios import SCENARIOS, UNSAFE, ScenarioResult, run_scenario  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--minutes", type=float, default=0.0, help="keep running rounds this long (0: one round)"
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="the session's seed (default: random, printed)"
    )
    parser.add_argument("--only", nargs="*", default=None, help="scenario names (S1 ... S12, S8-async ...)")
    parser.add_argument("--no-unsafe", action="store_true", help="skip the deployments documented as unsafe")
    args = parser.parse_args()

    reason = netlab.unavailable()
    if reason is not None:
        print(f"chaos: cannot run: {reason}", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    rng = random.Random(seed)
    chosen = {**SCENARIOS, **({} if args.no_unsafe else UNSAFE)}
    if args.only:
        unknown = sorted(set(args.only) - set(chosen))
        if unknown:
            print(f"chaos: unknown scenarios {unknown}; known: {sorted(chosen)}", file=sys.stderr)
            return 2
        chosen = {name: chosen[name] for name in args.only}
    print(f"chaos: session seed {seed}; scenarios {', '.join(chosen)}", flush=True)
    deadline = time.monotonic() + args.minutes * 60
    results: list[ScenarioResult] = []
    violations = 0
    base = Path(tempfile.mkdtemp(prefix="trocket-chaos-"))
    round_number = 0
    while True:
        round_number += 1
        for name, (scenario, deployment) in chosen.items():
            run_seed = rng.randrange(2**31)
            root = base / f"{round_number:03d}-{name}"
            root.mkdir()
            result = run_scenario(name, scenario, deployment=deployment, seed=run_seed, root=root)
            results.append(result)
            unsafe = name in UNSAFE
            if not unsafe and not result.report.safe:
                violations += 1
            tag = "unsafe deployment, reported" if unsafe else ("ok" if result.report.safe else "VIOLATION")
            print(f"[{tag}] {deployment.label()}: {result.line()}", flush=True)
            if tag != "VIOLATION":
                keep_history_only(root)
        if time.monotonic() >= deadline:
            break
    acked = sum(r.report.acked for r in results)
    print(
        f"chaos: {len(results)} runs in {round_number} rounds, {acked} acknowledged sends; "
        f"safety violations in safe deployments: {violations}; histories under {base}"
    )
    return 1 if violations else 0


KEPT = (".jsonl", ".log", ".toml")
"""What a run without a violation keeps: its history, logs and configs. Stores and disk images
(about 400 MB a run) go, or a long run fills the disk (55 runs left 23 GB)."""


def keep_history_only(root: Path) -> None:
    for directory, _, files in os.walk(root, topdown=False):
        for name in files:
            if not name.endswith(KEPT):
                (Path(directory) / name).unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # not empty: it holds what is kept
            Path(directory).rmdir()


if __name__ == "__main__":
    sys.exit(main())
