"""Two pithlog trees timed side by side on the same machine: reduce, append and replay of
one file, each tree's ``python -m pithlog`` run from its own folder, the trees alternating
in each round, each figure divided by the raw verify rate measured around it (the
machines are shared; a ratio to a rate measured minutes apart mostly measures the drift).

    .venv/bin/python bench/compare_trees.py OLD_TREE NEW_TREE [--rounds 3]
        [--commands reduce,append,replay:2] [--events bench/.cache/mixed-100000.jsonl]

A tree is a checkout (``git worktree add /tmp/old COMMIT``) whose dependencies this
interpreter has. Printed: each timing, then per command each tree's median ratio and CPU
per event (in raw verifies), and NEW ÷ OLD per round with its median.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from verify_rate import raw_verify_rate

HERE = Path(__file__).resolve().parent


def timed_command(tree: str, argv: list[str], events: int) -> tuple[float, float]:
    """``pithlog argv`` with ``tree``'s code: its rate ÷ the verify rate around it, and its
    CPU per event (every process it started) in raw verifies."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    rate_before = raw_verify_rate(3000)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pithlog", *argv], cwd=tree, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, "PYTHONPATH": tree})  # fmt: skip
    seconds = time.perf_counter() - start
    verify = (rate_before + raw_verify_rate(3000)) / 2
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return events / seconds / verify, cpu / events * verify


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commands", default="reduce,append,replay:2")
    parser.add_argument("--events", default=str(HERE / ".cache" / "mixed-100000.jsonl"))
    parser.add_argument("--keyring", default=str(HERE / ".cache" / "keyring.json"))
    args = parser.parse_args()
    trees = [str(Path(args.old).resolve()), str(Path(args.new).resolve())]
    commands = args.commands.split(",")
    with open(args.events, "rb") as lines:
        events = sum(1 for _ in lines)
    got: dict[tuple[str, str], list[tuple[float, float]]] = {
        (t, c): [] for t in trees for c in commands}  # fmt: skip
    scratch = Path(tempfile.mkdtemp(prefix="pithlog-compare-"))
    try:
        for round_ in range(args.rounds):
            for tree in trees if round_ % 2 == 0 else trees[::-1]:
                store = str(scratch / str(trees.index(tree)))
                for command in commands:
                    if command == "reduce":
                        argv = ["reduce", "--keyring", args.keyring, args.events]
                    elif command == "append":
                        shutil.rmtree(store, ignore_errors=True)
                        argv = ["--store", store, "append", "--keyring", args.keyring,
                                "--batch-size", "1000", args.events]  # fmt: skip
                    else:  # replay:JOBS, over the store this tree appended
                        argv = ["--store", store, "replay", "--verify", "--keyring",
                                args.keyring, "--jobs", command.split(":")[1]]  # fmt: skip
                    ratio, cpu = timed_command(tree, argv, events)
                    got[(tree, command)].append((ratio, cpu))
                    print(f"round {round_} {tree} {command}: {ratio:.2f}x verify, "
                          f"CPU {cpu:.2f} verifies per event", flush=True)  # fmt: skip
        for command in commands:
            for tree in trees:
                runs = got[(tree, command)]
                print(f"{command}: {tree}: median {statistics.median(r for r, _ in runs):.2f}x "
                      f"verify, CPU {statistics.median(c for _, c in runs):.2f}")  # fmt: skip
            per_round = [n[0] / o[0] for o, n in zip(got[(trees[0], command)],
                                                     got[(trees[1], command)], strict=True)]
            print(f"{command}: new ÷ old per round {[round(x, 2) for x in per_round]}, "
                  f"median {statistics.median(per_round):.2f}")  # fmt: skip
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
