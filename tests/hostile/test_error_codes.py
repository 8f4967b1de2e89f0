"""Stable error codes, and what the command line prints when it refuses.

The codes of the families below are pinned as a literal list, so that adding, removing or
renaming one is a deliberate act (``docs/errors.md`` lists them too). Other modules (the
store, and what follows it) register codes of their own at import; they are not pinned
here. Every refusal triggered below prints exactly one stderr line,
``pithlog: [family.detail] ...`` or ``pithlog: line N: [family.detail] ...``, whose code is
registered, and the message says what to do about it.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pithlog.cli import main
from pithlog.errors import CODES
from pithlog.protocol.canonical import MAX_LINE_BYTES, jcs
from pithlog.protocol.keys import dump_key_file
from pithlog.protocol.text_forms import encode_b64
from pithlog.testing import test_key, test_keyring_entries, write_key_file

from .corpus import CANONICAL_RECORD, ORIGINALS, PITH

OTHER_PITH = "pith:2024:" + "A" * 26
PINNED_FAMILIES = ("door", "keyring", "key_file", "sign", "usage")

PINNED_CODES = [
    "door.bom",
    "door.duplicate_member",
    "door.event_id",
    "door.line_too_long",
    "door.lone_surrogate",
    "door.not_object",
    "door.number_form",
    "door.number_range",
    "door.pith_number",
    "door.syntax",
    "door.too_deep",
    "door.too_large",
    "door.utf8",
    "key_file.member",
    "key_file.not_json",
    "key_file.private_key",
    "key_file.public_key",
    "key_file.signer_type",
    "key_file.unwritable",
    "key_file.version",
    "keyring.duplicate_key_id",
    "keyring.duplicate_public_key",
    "keyring.key_id",
    "keyring.missing_member",
    "keyring.not_a_keyring",
    "keyring.not_an_entry",
    "keyring.not_json",
    "keyring.public_key",
    "keyring.revoked",
    "keyring.shape",
    "keyring.signer_id",
    "keyring.signer_type",
    "keyring.timestamp",
    "keyring.too_large",
    "keyring.unknown_key_id",
    "keyring.unwritable",
    "keyring.validity",
    "keyring.version",
    "sign.invalid_event",
    "sign.payload",
    "sign.pith_number",
    "usage.arguments",
    "usage.cores",
    "usage.event_type",
    "usage.exists",
    "usage.net_extra",
    "usage.output",
    "usage.output_closed",
    "usage.pith_number",
    "usage.several_states",
    "usage.state_too_large",
    "usage.target",
    "usage.timestamp",
    "usage.unreadable",
    "usage.unwritable",
]


def test_the_codes_of_the_pinned_families_are_exactly_these() -> None:
    import pithlog.cli  # noqa: F401  (modules that register codes are imported by now)

    pinned = sorted(c for c in CODES if c.split(".", 1)[0] in PINNED_FAMILIES)
    assert pinned == PINNED_CODES


def test_every_code_is_family_dot_detail() -> None:
    for code in CODES:
        assert re.fullmatch(r"[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*", code), code


# --- refusals through the command line -----------------------------------------------------

ONE_LINE = re.compile(r"pithlog: (?:line (\d+): )?\[([a-z0-9_]+\.[a-z0-9_]+)\] (.+)")
# Words by which a message says what to do (or the rule to meet) rather than only what
# went wrong.
ADVICE = re.compile(
    r"\b(must|only|allowed|at most|limit|use|send|remove|keep|write|pass|need|needs|"
    r"give|set|re-encode|one of|exactly|of the form|check|fix|see|unless|rather|instead|"
    r"flatten|no more than|replace|required|expecting)\b",
    re.IGNORECASE,
)


def run(argv: list[str]) -> tuple[int, bytes, list[str]]:
    out, err = io.BytesIO(), io.StringIO()
    status = main(argv, stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue().splitlines()


def refusal(argv: list[str]) -> tuple[int, str, str]:
    """Run a command that must refuse; the one stderr line's (line number, code, message)."""
    status, _, err = run(argv)
    assert status == 2, (argv, err)
    assert len(err) == 1, err
    match = ONE_LINE.fullmatch(err[0])
    assert match, err[0]
    assert match.group(2) in CODES
    assert err[0].isprintable()
    return int(match.group(1) or 0), match.group(2), match.group(3)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    keyring = {"keyring_version": "1", "keys": test_keyring_entries()}
    paths = {
        "keyring": tmp_path / "keyring.json",
        "key": tmp_path / "registry.key",
        "author_key": tmp_path / "author.key",
        "record": tmp_path / "record.json",
        "object": tmp_path / "object.json",
    }
    paths["keyring"].write_bytes(jcs(keyring))
    write_key_file(paths["key"], test_key("registry"))
    write_key_file(paths["author_key"], test_key("author"))
    paths["record"].write_bytes(jcs({"canonical_record": CANONICAL_RECORD}))
    paths["object"].write_bytes(b'{"statement":"x"}')
    return paths


DOOR_LINES: list[tuple[str, bytes]] = [
    ("door.bom", b"\xef\xbb\xbf" + ORIGINALS[0]),
    ("door.utf8", b'{"a":"\xff"}'),
    ("door.syntax", b'{"a":1,}'),
    ("door.duplicate_member", b'{"a":1,"a":2}'),
    ("door.number_form", b'{"a":1.0}'),
    ("door.number_range", b'{"a":9007199254740992}'),
    ("door.lone_surrogate", b'{"a":"\\ud800"}'),
    ("door.too_deep", b"[" * 65 + b"]" * 65),
    ("door.too_large", b"[" + b"[]," * 400_000 + b"[]]"),
    ("door.not_object", b"[1]"),
    ("door.event_id", b'{"event_id":"sha256:ABC"}'),
    ("door.pith_number", b'{"event_id":"sha256:' + b"0" * 64 + b'","pith_number":"x"}'),
]


def test_each_refused_line_is_one_line_naming_its_number(
    files: dict[str, Path], tmp_path: Path
) -> None:
    lines = [b"", *(data for _, data in DOOR_LINES), ORIGINALS[0], b"x" * (MAX_LINE_BYTES + 1)]
    events = tmp_path / "events.jsonl"
    events.write_bytes(b"\n".join(lines) + b"\n")
    status, out, err = run(["reduce", "--keyring", str(files["keyring"]), str(events)])
    assert status == 2
    assert len(out.splitlines()) == 1  # the record still became a state
    expected = [(i + 2, code) for i, (code, _) in enumerate(DOOR_LINES)]
    expected.append((len(lines), "door.line_too_long"))
    seen = []
    for line in err[:-1]:
        match = ONE_LINE.fullmatch(line)
        assert match and line.isprintable(), line
        seen.append((int(match.group(1)), match.group(2)))
        assert ADVICE.search(match.group(3)), f"says what is wrong, not what to do: {line}"
    assert seen == expected
    assert err[-1].startswith("reduce: ")


@pytest.mark.parametrize("name", ["a\nb", "\x1b[2J", "x\u2028y", "\x00"])
def test_a_member_name_in_an_error_location_is_shown_escaped(
    files: dict[str, Path], tmp_path: Path, name: str
) -> None:
    """The location of an error names members chosen by the sender: shown escaped, so the
    refusal stays one line and writes no terminal escapes."""
    events = tmp_path / "events.jsonl"
    deep = {name: json.loads("[" * 70 + "]" * 70)}
    events.write_bytes(json.dumps(deep).encode())
    status, _, err = run(["reduce", "--keyring", str(files["keyring"]), str(events)])
    assert status == 2 and len(err) == 2 and err[1].startswith("reduce: ")
    match = ONE_LINE.fullmatch(err[0])
    assert match and err[0].isprintable(), err
    assert (match.group(1), match.group(2)) == ("1", "door.too_deep")
    assert "\\u" in match.group(3)


def _keyring_with(tmp_path: Path, doc: Any) -> Path:
    path = tmp_path / "bad-keyring.json"
    path.write_bytes(doc if isinstance(doc, bytes) else json.dumps(doc).encode())
    return path


def _good_key_doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(dump_key_file(test_key("registry")))
    return doc


def _entry(**changes: Any) -> dict[str, Any]:
    entry = test_keyring_entries(("registry",))[0]
    entry.update(changes)
    return entry


KEYRINGS: list[tuple[str, Any]] = [
    ("keyring.not_json", b'{"keyring_version":"1","keys":[],}'),
    ("keyring.shape", []),
    ("keyring.shape", {"keyring_version": "1", "keys": {}}),
    ("keyring.shape", {"keyring_version": "1", "keys": [1]}),
    ("keyring.version", {"keyring_version": 1, "keys": []}),
    ("keyring.missing_member", {"keyring_version": "1", "keys": [{"key_id": "k"}]}),
    ("keyring.key_id", {"keyring_version": "1", "keys": [_entry(key_id="")]}),
    ("keyring.duplicate_key_id", {"keyring_version": "1", "keys": [_entry(), _entry()]}),
    ("keyring.signer_id", {"keyring_version": "1", "keys": [_entry(signer_id=None)]}),
    ("keyring.signer_type", {"keyring_version": "1", "keys": [_entry(signer_type="root")]}),
    ("keyring.public_key", {"keyring_version": "1",
                            "keys": [_entry(public_key_b64=encode_b64(bytes(32)))]}),
    ("keyring.timestamp", {"keyring_version": "1", "keys": [_entry(not_after="2026")]}),
    ("keyring.validity", {"keyring_version": "1", "keys": [
        _entry(not_before="2026-01-01T00:00:00Z", not_after="2025-01-01T00:00:00Z")]}),
    ("keyring.not_a_keyring", _entry()),
    ("keyring.not_a_keyring", _good_key_doc()),
]  # fmt: skip

KEYRING_EDITS: list[tuple[str, list[str]]] = [
    ("keyring.not_an_entry", ["add", "RING", '{"keyring_version": "1", "keys": []}']),
    ("keyring.not_an_entry", ["add", "RING", "[1]"]),
    ("keyring.duplicate_public_key", ["add", "RING", json.dumps(_entry(key_id="again"))]),
    ("keyring.unknown_key_id", ["revoke", "RING", "nobody", "--at", "2026-01-01T00:00:00Z"]),
    ("keyring.revoked", ["revoke", "RING", "revoked", "--at", "2026-02-01T00:00:00Z"]),
    ("keyring.unwritable", ["new", "NOWHERE"]),
    ("keyring.too_large", ["add", "FULL", json.dumps(_entry(key_id="one-more"))]),
]  # fmt: skip


@pytest.mark.parametrize(("code", "argv"), KEYRING_EDITS, ids=[c for c, _ in KEYRING_EDITS])
def test_a_refused_keyring_edit_is_one_line(tmp_path: Path, code: str, argv: list[str]) -> None:
    ring = tmp_path / "keyring.json"
    revoked = _entry(key_id="revoked", public_key_b64=encode_b64(test_key("author").public_key),
                     revoked_at="2026-01-01T00:00:00Z")  # fmt: skip
    ring.write_text(json.dumps({"keyring_version": "1", "keys": [_entry(), revoked]}))
    where = {"RING": str(ring), "NOWHERE": str(tmp_path / "no" / "such" / "folder.json")}
    if "FULL" in argv:  # a keyring of 8 MiB less a few bytes, its bulk in an ignored member
        full = tmp_path / "full.json"
        full.write_text(json.dumps({"keyring_version": "1", "keys": [],
                                    "note": "x" * (MAX_LINE_BYTES - 100)}))  # fmt: skip
        where["FULL"] = str(full)
    number, got, message = refusal(["keyring", *(where.get(a, a) for a in argv)])
    assert (number, got) == (0, code)
    assert ADVICE.search(message), message


@pytest.mark.parametrize(("code", "doc"), KEYRINGS, ids=[c for c, _ in KEYRINGS])
def test_a_bad_keyring_is_one_line(
    files: dict[str, Path], tmp_path: Path, code: str, doc: Any
) -> None:
    keyring = _keyring_with(tmp_path, doc)
    events = tmp_path / "events.jsonl"
    events.write_bytes(ORIGINALS[0])
    number, got, message = refusal(["reduce", "--keyring", str(keyring), str(events)])
    assert (number, got) == (0, code)
    assert ADVICE.search(message), message


def _key_file(tmp_path: Path, doc: Any) -> Path:
    path = tmp_path / "bad.key"
    path.write_bytes(doc if isinstance(doc, bytes) else json.dumps(doc).encode())
    return path


KEY_FILES: list[tuple[str, Any]] = [
    ("key_file.not_json", b"key: yes"),
    ("key_file.version", {**_good_key_doc(), "key_file_version": "2"}),
    ("key_file.member", {**_good_key_doc(), "key_id": ""}),
    ("key_file.signer_type", {**_good_key_doc(), "signer_type": "root"}),
    ("key_file.private_key", {**_good_key_doc(), "private_key_b64": encode_b64(bytes(31))}),
    ("key_file.public_key", {**_good_key_doc(),
                             "public_key_b64": encode_b64(test_key("author").public_key)}),
]  # fmt: skip


@pytest.mark.parametrize(("code", "doc"), KEY_FILES, ids=[c for c, _ in KEY_FILES])
def test_a_bad_key_file_is_one_line(
    files: dict[str, Path], tmp_path: Path, code: str, doc: Any
) -> None:
    key = _key_file(tmp_path, doc)
    argv = ["sign", "--key", str(key), "--type", "record_created", "--payload",
            str(files["record"]), "--created-at", "2026-01-01T00:00:00Z"]  # fmt: skip
    assert refusal(argv)[1] == code
    assert ADVICE.search(refusal(argv)[2]), refusal(argv)[2]


def _sign(files: dict[str, Path], *extra: str, key: str = "key") -> list[str]:
    return ["sign", "--key", str(files[key]), "--created-at", "2026-01-01T00:00:00Z", *extra]


class _FullOutput(io.BytesIO):
    def write(self, data: Any) -> int:
        raise OSError(28, "No space left on device")


class _ClosingOutput(io.BytesIO):
    def write(self, data: Any) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_sign_and_usage_refusals_are_one_line(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    not_object = tmp_path / "list.json"
    not_object.write_bytes(b"[1]")
    not_json = tmp_path / "bad.json"
    not_json.write_bytes(b"{")
    existing = tmp_path / "exists.key"
    existing.write_bytes(b"x")
    two_states = tmp_path / "states.jsonl"
    two_states.write_bytes(b"{}\n{}\n")
    cases: list[tuple[str, list[str]]] = [
        ("sign.payload", _sign(files, "--type", "mirror_hint", "--pith", PITH,
                               "--payload", str(not_object))),
        ("sign.payload", _sign(files, "--type", "mirror_hint", "--pith", PITH,
                               "--payload", str(not_json))),
        ("sign.payload", _sign(files, "--type", "record_created", "--payload",
                               str(files["object"]))),
        ("sign.pith_number", _sign(files, "--type", "record_created", "--pith", OTHER_PITH,
                                   "--payload", str(files["record"]))),
        ("sign.invalid_event", _sign(files, "--type", "correction", "--pith", PITH,
                                     "--payload", str(files["object"]), key="author_key")),
        ("usage.arguments", []),
        ("usage.arguments", ["reduce"]),
        ("usage.arguments", ["frobnicate"]),
        ("usage.unreadable", ["reduce", "--keyring", str(tmp_path / "none.json"),
                              str(tmp_path / "none.jsonl")]),
        ("usage.unreadable", ["reduce", "--keyring", str(files["keyring"]),
                              str(tmp_path / "none.jsonl")]),
        ("usage.unreadable", ["verify-state", str(tmp_path)]),
        ("usage.several_states", ["verify-state", str(two_states)]),
        ("usage.state_too_large", ["verify-state", "--max-bytes", "4", str(two_states)]),
        ("usage.exists", ["keygen", "--key-id", "k", "--signer-id", "s", "--signer-type",
                          "mirror", "--out", str(existing)]),
        ("usage.timestamp", ["keygen", "--key-id", "k", "--signer-id", "s", "--signer-type",
                             "mirror", "--out", str(tmp_path / "n.key"),
                             "--not-before", "2026-01-01"]),
        ("usage.event_type", _sign(files, "--type", "nope", "--payload",
                                   str(files["object"]))),
        ("usage.target", _sign(files, "--type", "author_attestation", "--pith", PITH,
                               "--payload", str(files["object"]), key="author_key")),
        ("usage.timestamp", ["sign", "--key", str(files["key"]), "--type", "mirror_hint",
                             "--pith", PITH, "--payload", str(files["object"]),
                             "--created-at", "2026-01-01T00:00:00+00:00"]),
        ("usage.pith_number", _sign(files, "--type", "mirror_hint", "--payload",
                                    str(files["object"]))),
        ("usage.pith_number", _sign(files, "--type", "mirror_hint", "--pith", PITH.lower(),
                                    "--payload", str(files["object"]))),
        ("usage.unwritable", ["--store", str(tmp_path / "store"), "export", "--out",
                              str(existing)]),
        ("key_file.unwritable", ["keygen", "--key-id", "k", "--signer-id", "s",
                                 "--signer-type", "mirror",
                                 "--out", str(tmp_path / "no" / "such" / "k.key")]),
    ]  # fmt: skip
    seen = set()
    for code, argv in cases:
        number, got, message = refusal(argv)
        assert (number, got) == (0, code), (argv, message)
        assert ADVICE.search(message), f"{code}: {message}"
        seen.add(code)
    with monkeypatch.context() as env:  # what sizes the pools, from the environment
        env.setenv("PITHLOG_CORES", "0")
        events = tmp_path / "one.jsonl"
        events.write_bytes(ORIGINALS[0] + b"\n")
        number, got, message = refusal(["reduce", "--keyring", str(files["keyring"]),
                                        str(events)])  # fmt: skip
        assert (number, got) == (0, "usage.cores") and ADVICE.search(message), message
        seen.add(got)
    # installed without pithlog[net]: in a process of its own, where httpx cannot be imported
    done = subprocess.run([sys.executable, "-c", "import sys; sys.modules['httpx'] = None; "
                           "from pithlog.cli import entry; entry()", "mirror",
                           "http://127.0.0.1:9", "--keyring", str(files["keyring"])],
                          capture_output=True, timeout=60, check=False)  # fmt: skip
    match = ONE_LINE.fullmatch(done.stderr.decode().rstrip("\n"))
    assert done.returncode == 2 and match, done.stderr
    assert match.group(2) == "usage.net_extra" and ADVICE.search(match.group(3)), done.stderr
    seen.add(match.group(2))
    closing = _ClosingOutput()  # append | head -0: the reader gone before the first line
    err = io.StringIO()
    assert main(["--store", str(tmp_path / "store"), "append", "--keyring",
                 str(files["keyring"]), str(events)], stdout=closing, stderr=err) == 2
    match = ONE_LINE.fullmatch(err.getvalue().rstrip("\n"))
    assert match and match.group(2) == "usage.output_closed", err.getvalue()
    assert ADVICE.search(match.group(3)), match.group(3)
    seen.add(match.group(2))
    err = io.StringIO()  # a read command on a full disk
    assert main(["--store", str(tmp_path / "store"), "stats"], stdout=_FullOutput(),
                stderr=err) == 2  # fmt: skip
    match = ONE_LINE.fullmatch(err.getvalue().rstrip("\n"))
    assert match and match.group(2) == "usage.output", err.getvalue()
    assert ADVICE.search(match.group(3)), match.group(3)
    seen.add(match.group(2))
    pinned_cli = {c for c in PINNED_CODES if c.startswith(("sign.", "usage."))}
    assert pinned_cli <= seen


def test_every_pinned_code_is_triggered_by_some_test_here() -> None:
    triggered = {code for code, _ in DOOR_LINES} | {"door.line_too_long"}
    triggered |= {code for code, _ in KEYRINGS} | {code for code, _ in KEY_FILES}
    triggered |= {code for code, _ in KEYRING_EDITS}
    triggered |= {"key_file.unwritable"}
    triggered |= {c for c in PINNED_CODES if c.startswith(("sign.", "usage."))}
    assert triggered == set(PINNED_CODES)
