"""pithlog.net.evidence_files: an evidence file is written whole where asked, else in the
temporary folder with the reason, else the reason alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from pithlog.net.evidence_files import write_evidence


def test_evidence_is_written_where_asked_else_in_the_spare_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spare = tmp_path / "spare"
    spare.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(spare))
    path, problem = write_evidence(tmp_path / "new" / "folder", "a.json", b"{}")
    assert (path, problem) == (tmp_path / "new" / "folder" / "a.json", None)
    assert path.read_bytes() == b"{}" and sorted(path.parent.iterdir()) == [path]  # no temp
    blocked = tmp_path / "blocked"
    blocked.write_bytes(b"")
    path, problem = write_evidence(blocked, "b.json", b"[]")
    assert path == spare / "b.json" and path.read_bytes() == b"[]"
    assert problem is not None and problem.startswith(f"{blocked} could not take it: ")
    monkeypatch.setattr("tempfile.tempdir", str(blocked))  # the spare is no folder either
    path, problem = write_evidence(blocked, "c.json", b"[]")
    assert path is None and problem is not None and f"nor could {blocked}" in problem


def test_an_origin_makes_a_file_name_of_bounded_length() -> None:
    from pithlog.net.mirror_consistency import file_safe

    assert file_safe("registry.example/pith") == "registry.example_pith"
    long = "registry.test.invalid/" + "a" * 300
    cut = file_safe(long)
    assert len(cut) == 64 + 1 + 16 and cut.startswith("registry.test.invalid_aaa")
    assert cut != file_safe(long + "b") and file_safe(long) == cut  # the hash keeps them apart


def test_evidence_is_on_disk_before_and_after_its_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file's bytes are synced before the rename and its folder after: renamed unsynced,
    a crash can leave the evidence file empty under its name (a delayed allocation), or
    gone, while mirror had already reported where it was."""
    import os
    import stat

    done: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        done.append("folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        done.append("rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    path, problem = write_evidence(tmp_path / "evidence", "split.json", b"{}")
    assert problem is None and path is not None and path.read_bytes() == b"{}"
    assert done == ["file", "rename", "folder"]
