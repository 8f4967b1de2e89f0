"""The error codes: registered, documented, and pinned."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from pithlog.errors import CODES, DoorError, PithlogError

ROOT = Path(__file__).resolve().parents[2]


def _errors_doc_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("errors_doc", ROOT / "scripts" / "errors_doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_errors_md_is_current() -> None:
    expected = _errors_doc_module().render()
    assert (ROOT / "docs" / "errors.md").read_text(encoding="utf-8") == expected, (
        "docs/errors.md is stale: run `make docs`"
    )


def test_unregistered_code_is_refused() -> None:
    with pytest.raises(ValueError, match=r"unregistered error code door\.nonsense"):
        DoorError("nonsense", "x")


def test_every_code_is_family_dot_detail_and_says_what_to_fix() -> None:
    for code, fix in CODES.items():
        family, _, detail = code.partition(".")
        assert family and detail and detail == detail.lower(), code
        assert len(fix) > 10, code


def test_describe_is_one_line() -> None:
    err: PithlogError = DoorError("syntax", "not JSON: Expecting value", "line 1 column 1")
    assert err.code == "door.syntax"
    assert err.describe() == "[door.syntax] not JSON: Expecting value (at line 1 column 1)"
    assert "\n" not in err.describe()


def test_every_error_class_survives_pickling_with_its_code_message_and_place() -> None:
    # Errors raised in worker and helper processes reach the parent pickled.
    import pickle

    import pithlog.store  # noqa: F401 - registers the store's codes
    from pithlog import errors

    families = {cls.family: cls for cls in vars(errors).values()
                if isinstance(cls, type) and issubclass(cls, PithlogError)}  # fmt: skip
    seen = set()
    for code in CODES:
        family, _, detail = code.partition(".")
        cls = families[family]
        error = cls(detail, f"what went wrong with {code}", "line 7")
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is cls
        assert (back.code, back.message, back.where, str(back)) == (
            error.code, error.message, error.where, str(error))  # fmt: skip
        seen.add(cls)
    assert len(seen) >= 8


def test_a_cut_message_is_at_most_max_message_and_crosses_processes_as_it_is() -> None:
    """A message is cut to MAX_MESSAGE characters, the count of those cut included. It was
    cut to 1,500 + the count + 500, longer than MAX_MESSAGE, so an error rebuilt from its
    message in another process (__reduce__) was cut again: 998,000 characters cut became
    "32 characters cut"."""
    import pickle

    from pithlog.errors import MAX_MESSAGE, KeyringError

    for size in (MAX_MESSAGE + 1, 10**6, 10**8):
        error = KeyringError("signer_type", "x" * (size - 4) + " end")
        assert len(error.message) <= MAX_MESSAGE and error.message.endswith(" end")
        cut = int(error.message.split(" ...(")[1].split(" characters")[0].replace(",", ""))
        assert len(error.message.replace(f" ...({cut:,} characters cut)... ", "")) + cut == size
        back = pickle.loads(pickle.dumps(error))
        assert (back.message, str(back)) == (error.message, str(error))


def test_docs_errors_md_gives_each_code_its_exit_status() -> None:
    # not every error exits 2: a failed verification exits 1, a store behind 3
    rows = {line.split("`")[1]: line.split("|")[2].strip()
            for line in (ROOT / "docs" / "errors.md").read_text(encoding="utf-8").splitlines()
            if line.startswith("| `")}  # fmt: skip
    assert rows["checkpoint.untrusted"] == "1" and rows["proof.inclusion"] == "1"
    assert rows["checkpoint.behind"] == "3"
    assert rows["door.syntax"] == "2" and rows["checkpoint.malformed"] == "2"


def test_a_long_where_is_cut_as_a_message_is() -> None:
    """A JSON Pointer names the members it passes, and a member name may be megabytes: a
    3 MB name above a lone surrogate made the door's one-line error 3 MB long, past the
    bound its message is held to."""
    import pickle

    from pithlog import parse
    from pithlog.errors import MAX_MESSAGE, MAX_WHERE

    name = "a" * 3_000_000
    with pytest.raises(DoorError) as refused:
        parse(('{"' + name + '": {"inner": "\\ud800"}}').encode())
    where = refused.value.where
    assert where is not None and len(where) <= MAX_WHERE and where.endswith("/inner")
    assert "characters cut" in where and len(refused.value.describe()) < MAX_MESSAGE + 600
    back = pickle.loads(pickle.dumps(refused.value))
    assert back.where == where
