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
    """The file's bytes are synced before it is given its name (a hard link to the
    temporary file, which is then removed) and its folder after: renamed unsynced,
    a crash can leave the evidence file empty under its name (a delayed allocation), or
    gone, while mirror had already reported where it was."""
    import os
    import stat

    done: list[str] = []
    real_fsync, real_link = os.fsync, os.link

    def fsync(fd: int) -> None:
        done.append("folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    def link(src: str, dst: str) -> None:
        done.append("link")
        real_link(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "link", link)
    path, problem = write_evidence(tmp_path / "evidence", "split.json", b"{}")
    assert problem is None and path is not None and path.read_bytes() == b"{}"
    assert done == ["file", "link", "folder"]
    assert sorted(path.parent.iterdir()) == [path]  # the temporary name gone


def test_an_earlier_evidence_file_is_never_replaced(tmp_path: Path) -> None:
    """The file was renamed over whatever had its name: an audit run again wrote
    equivocation-<pith>-<N>.json over the last run's, whose slot N may be another slot
    by then (a new equivocation sorts before it, or a keyring change leaves it valid no
    more), and a split view in the same second as another over the same sizes replaced
    its file: evidence lost without a word. A name taken by other bytes is now kept, and
    the new file takes the next free name; the same bytes again are the same file."""
    folder = tmp_path / "evidence"
    first, problem = write_evidence(folder, "equivocation-p-1.json", b"slot A\n")
    assert problem is None and first == folder / "equivocation-p-1.json"
    second, problem = write_evidence(folder, "equivocation-p-1.json", b"slot B\n")
    assert problem is None and second == folder / "equivocation-p-1.2.json"
    third, _ = write_evidence(folder, "equivocation-p-1.json", b"slot C\n")
    assert third == folder / "equivocation-p-1.3.json"
    again, _ = write_evidence(folder, "equivocation-p-1.json", b"slot B\n")
    assert again == second
    assert [p.read_bytes() for p in (first, second, third)] == [b"slot A\n", b"slot B\n",
                                                                b"slot C\n"]  # fmt: skip
    assert sorted(p.name for p in folder.iterdir()) == [
        "equivocation-p-1.2.json", "equivocation-p-1.3.json", "equivocation-p-1.json"]


def test_a_link_planted_at_the_temporary_name_is_not_written_through(tmp_path: Path) -> None:
    """The file was first written to .NAME.PID.tmp, opened to write: in a shared folder
    (the system's temporary folder, where evidence goes when --evidence-dir cannot take
    it) anyone could plant a symbolic link at that name, its NAME and PID being easy to
    guess, and the evidence was written into the file it points to (truncating it). The
    temporary file is now made new (O_EXCL, a name of random letters)."""
    import os

    folder = tmp_path / "shared"
    folder.mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    name = "split-view-o-1-2-20260101T000000Z.json"
    (folder / f".{name}.{os.getpid()}.tmp").symlink_to(victim)
    path, problem = write_evidence(folder, name, b"evidence\n")
    assert problem is None and path == folder / name and path.read_bytes() == b"evidence\n"
    assert victim.read_bytes() == b"precious\n"
