"""How many cores pithlog sizes its pools by (pithlog.parallel.cores), and the replay
worker count that follows from it and from the log's size."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pithlog.errors import UsageError
from pithlog.parallel import cores
from pithlog.parallel.cores import cgroup_quota, usable_cores
from pithlog.store.replay_processes import COPIES_PER_WORKER, POOL_MIN_COPIES, replay_jobs


@pytest.fixture
def cgroup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """cgroup file systems of our own in place of the system's: ``v2/`` and ``v1/`` (the
    ``cpu`` controller's), and the process's ``/proc/self/cgroup`` as ``self``; none of
    their files exist until written."""
    monkeypatch.delenv(cores.ENV, raising=False)
    monkeypatch.setattr(cores, "CGROUP_V2_ROOT", str(tmp_path / "v2"))
    monkeypatch.setattr(cores, "CGROUP_V1_CPU_ROOT", str(tmp_path / "v1"))
    monkeypatch.setattr(cores, "PROC_SELF_CGROUP", str(tmp_path / "self"))
    cores.system_cores.cache_clear()  # read once per process: read ours
    yield tmp_path
    cores.system_cores.cache_clear()


def put(folder: Path, files: dict[str, str]) -> None:
    """The files of one cgroup's folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text + "\n")


@pytest.mark.parametrize(
    ("text", "quota"),
    [("200000 100000", 2.0), ("150000 100000", 1.5), ("max 100000", None),
     ("50000", None), ("x 100000", None), ("0 100000", None)],
)  # fmt: skip
def test_cgroup_v2_quota(cgroup: Path, text: str, quota: float | None) -> None:
    put(cgroup / "v2", {"cpu.max": text})
    assert cgroup_quota() == quota


@pytest.mark.parametrize(
    ("quota", "period", "expected"),
    [("50000", "100000", 0.5), ("-1", "100000", None), ("300000", "100000", 3.0),
     ("300000", "0", None)],
)  # fmt: skip
def test_cgroup_v1_quota(cgroup: Path, quota: str, period: str, expected: float | None) -> None:
    put(cgroup / "v1", {"cpu.cfs_quota_us": quota, "cpu.cfs_period_us": period})
    assert cgroup_quota() == expected


def test_no_cgroup_files_no_quota(cgroup: Path) -> None:
    assert cgroup_quota() is None


def test_the_quota_of_the_process_cgroup_and_those_above_it(cgroup: Path) -> None:
    """A systemd service (CPUQuota=) or its slice: the process's own cgroup is read, and
    every cgroup above it; the fewest CPUs win. Cgroups beside it do not count."""
    (cgroup / "self").write_text("0::/system.slice/pith.service\n")
    put(cgroup / "v2", {"cpu.max": "max 100000"})
    put(cgroup / "v2" / "system.slice/pith.service", {"cpu.max": "250000 100000"})
    put(cgroup / "v2" / "system.slice/other.service", {"cpu.max": "50000 100000"})
    assert cgroup_quota() == 2.5
    put(cgroup / "v2" / "system.slice", {"cpu.max": "120000 100000"})
    assert cgroup_quota() == 1.2


def test_a_v1_cpu_hierarchy_named_in_proc_self_cgroup(cgroup: Path) -> None:
    (cgroup / "self").write_text("5:memory:/svc\n4:cpu,cpuacct:/svc/web\n0::/\n")
    put(cgroup / "v1" / "svc/web", {"cpu.cfs_quota_us": "150000", "cpu.cfs_period_us": "100000"})
    put(cgroup / "v1", {"cpu.cfs_quota_us": "-1", "cpu.cfs_period_us": "100000"})
    assert cgroup_quota() == 1.5


def test_a_path_never_leaves_the_mount(cgroup: Path) -> None:
    (cgroup / "self").write_text("0::/../../outside\n")
    put(cgroup / "outside", {"cpu.max": "100000 100000"})  # beside the mount, not under it
    put(cgroup / "v2", {"cpu.max": "300000 100000"})
    assert cgroup_quota() == 3.0


@pytest.mark.parametrize(
    ("affinity", "quota_text", "expected"),
    [(8, "150000 100000", 2), (8, "max 100000", 8), (1, "400000 100000", 1),
     (16, "50000 100000", 1)],
)  # fmt: skip
def test_usable_cores_is_the_affinity_capped_by_the_quota(
    cgroup: Path, monkeypatch: pytest.MonkeyPatch, affinity: int, quota_text: str, expected: int
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(affinity)),
                        raising=False)  # fmt: skip
    put(cgroup / "v2", {"cpu.max": quota_text})
    assert usable_cores() == expected


def test_the_environment_decides_when_set(cgroup: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    put(cgroup / "v2", {"cpu.max": "100000 100000"})  # one CPU: the variable still wins
    monkeypatch.setenv(cores.ENV, "3")
    assert usable_cores() == 3


@pytest.mark.parametrize("value", ["0", "-2", "two", "", "²", " 2"])
def test_a_bad_value_is_a_usage_error(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(cores.ENV, value)
    with pytest.raises(UsageError) as caught:
        usable_cores()
    assert caught.value.code == "usage.cores"


@pytest.mark.skipif(shutil.which("taskset") is None or not hasattr(os, "sched_getaffinity"),
                    reason="needs taskset (util-linux) and affinity masks")  # fmt: skip
def test_a_process_pinned_to_one_cpu_counts_one() -> None:
    """The affinity a real process is started with (``taskset``), not the machine's CPUs."""
    env = {k: v for k, v in os.environ.items() if k != cores.ENV}
    code = "from pithlog.parallel import usable_cores; print(usable_cores())"
    first = sorted(os.sched_getaffinity(0))[0]
    out = subprocess.run(["taskset", "-c", str(first), sys.executable, "-c", code],
                         capture_output=True, text=True, env=env, check=True)  # fmt: skip
    assert out.stdout.strip() == "1"


def test_replay_workers_follow_the_log_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cores.ENV, "64")
    assert replay_jobs(None, POOL_MIN_COPIES - 1, True) == 1
    assert replay_jobs(None, POOL_MIN_COPIES, True) == POOL_MIN_COPIES // COPIES_PER_WORKER
    assert replay_jobs(None, 6_000, True) == 2
    assert replay_jobs(None, 64 * COPIES_PER_WORKER, True) == 64
    assert replay_jobs(None, 10**9, True) == 64  # never more than the cores
    assert replay_jobs(None, 10**9, False) == 1  # cached verdicts: this process alone
    assert replay_jobs(3, 10, False) == 3  # --jobs is what the user asked
    monkeypatch.setenv(cores.ENV, "2")
    assert replay_jobs(None, POOL_MIN_COPIES, True) == 2


def test_early_workers_follow_the_data_file_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replay's workers started before the store is opened: as many as replay_jobs gives
    for the most copies the data file can hold (a copy takes over 1 KiB), not one per core."""
    import contextlib

    import pithlog.store.replay_processes as rp

    started: list[int] = []

    class Pool:
        def submit(self, *args: object) -> None:
            pass

    def pool_spy(stack: object, processes: int, *rest: object) -> Pool:
        started.append(processes)
        return Pool()

    monkeypatch.setattr(rp, "worker_pool", pool_spy)
    monkeypatch.setenv(cores.ENV, "64")
    data = tmp_path / "data.mdb"
    for size, expected in [(rp.EARLY_MIN_BYTES - 1, None), (rp.EARLY_MIN_BYTES, 2),
                           (12 << 20, 12 * 1024 // COPIES_PER_WORKER), (1 << 30, 64)]:  # fmt: skip
        with open(data, "wb") as file:
            file.truncate(size)  # sparse: only the size is read
        started.clear()
        with contextlib.ExitStack() as stack:
            early = rp.early_workers(stack, str(tmp_path), None)
            assert (None if early is None else early.processes) == expected
            early = rp.early_workers(stack, str(tmp_path), 3)  # --jobs 3: what was asked
            assert early is not None and early.processes == 3
        assert started == ([] if expected is None else [expected]) + [3]  # pools of that size


def test_the_docs_state_replays_worker_count_as_replay_jobs_gives_it() -> None:
    """docs/api.md said ``jobs=None`` put any log of 5,000 copies in one worker per core,
    where replay_jobs keeps a replay on cached verdicts in this process and gives a
    verifying one at most a worker per COPIES_PER_WORKER copies."""
    root = Path(__file__).resolve().parents[2]
    api = (root / "docs" / "api.md").read_text(encoding="utf-8")
    said = " ".join(api.split("`jobs=None` runs", 1)[1].split("the same report")[0].split())
    assert f"{POOL_MIN_COPIES:,} copies" in said
    assert f"one per {COPIES_PER_WORKER:,} copies" in said
    assert "cached verdicts" in said and "verify=True" in said
    assert replay_jobs(None, 10**9, False) == 1


def test_store_md_states_the_data_file_size_that_starts_replays_workers_early() -> None:
    """docs/store.md said 5 MiB, where EARLY_MIN_BYTES is 5,000 KiB (5,120,000 bytes)."""
    from pithlog.store.replay_processes import EARLY_MIN_BYTES

    store_md = (Path(__file__).resolve().parents[2] / "docs" / "store.md").read_text("utf-8")
    said = " ".join(store_md.split("`replay_processes.early_workers`")[0].split()[-12:])
    assert f"a data file of {EARLY_MIN_BYTES // 1024:,} KiB or more" in said, said
