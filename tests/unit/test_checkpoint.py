"""Checkpoints: C2SP signed-note and tlog-checkpoint, against published vectors, and who
may sign them."""

from __future__ import annotations

import base64
import hashlib

import pytest

from pithlog.errors import EXIT_BAD_INPUT, EXIT_VERIFY_FAILED, CheckpointError
from pithlog.protocol.keys import KeyEntry, SigningKey, make_keyring, verify_signature
from pithlog.testing import test_key, test_keyring, test_keyring_entries
from pithlog.transparency.checkpoint import (
    MAX_NOTE_BYTES,
    MAX_SIGNATURES,
    MAX_TREE_SIZE,
    Checkpoint,
    Note,
    decimal_of,
    key_id,
    may_sign,
    parse_checkpoint_text,
    parse_note,
    sign_checkpoint,
    sign_note,
    verify_checkpoint,
)

# golang.org/x/mod/sumdb/note's documented example (PRIVATE+KEY+PeterNeumann+c74f20a3+...).
GO_SEED = base64.b64decode("AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz")[1:]
GO_PUBLIC = base64.b64decode("ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW")[1:]
GO_TEXT = (b"If you think cryptography is the answer to your problem,\n"
           b"then you don't know what your problem is.\n")  # fmt: skip
GO_NOTE = GO_TEXT + "\n\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgY" \
    "N1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n".encode()  # fmt: skip
# c2sp.org/signed-note's example verifier key and note.
SPEC_PUBLIC = base64.b64decode("AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k")[1:]
SPEC_NOTE = ("This is an example message.\n\n\u2014 example.com/foo Uw2QOkn8srV1yJGh2VYRlL1T"
             "nagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n").encode()

ORIGIN = "registry.test.invalid/pith-log"
ROOT = hashlib.sha256(b"root").digest()


def test_key_ids_and_signatures_of_the_published_examples() -> None:
    key = SigningKey.from_seed(GO_SEED, "go", "PeterNeumann", "pith_registry")
    assert key.public_key == GO_PUBLIC
    assert key_id("PeterNeumann", GO_PUBLIC).hex() == "c74f20a3"
    line = sign_note(GO_TEXT, "PeterNeumann", key).line()
    assert GO_TEXT + b"\n" + line.encode() == GO_NOTE  # Ed25519 is deterministic
    note = parse_note(GO_NOTE)
    assert note.text == GO_TEXT and note.encoded() == GO_NOTE

    assert key_id("example.com/foo", SPEC_PUBLIC).hex() == "530d903a"
    spec = parse_note(SPEC_NOTE)
    sig = spec.signatures[0]
    assert (sig.name, sig.key_id.hex()) == ("example.com/foo", "530d903a")
    entry = make_keyring([{"key_id": "foo", "public_key_b64": base64.b64encode(SPEC_PUBLIC)
                           .decode(), "signer_id": "example.com", "signer_type": "mirror",
                           "not_before": None, "not_after": None, "revoked_at": None}])["foo"]
    assert verify_signature(entry.verifier, sig.signature, spec.text)


# golang.org/x/mod/sumdb/note's TestOpen (note_test.go): a second signer, EnochRoot, and the
# notes Open must refuse as malformed, byte for byte (GO_NOTE above is TestOpen's text and
# PeterNeumann's line).
ENOCH_PUBLIC = base64.b64decode("ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop")[1:]
PETER_LINE = GO_NOTE[len(GO_TEXT) + 1 :]
ENOCH_LINE = ("\u2014 EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1a"
              "GrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=\n").encode()  # fmt: skip


def _go_entry(public: bytes) -> KeyEntry:
    return make_keyring([{"key_id": "k", "public_key_b64": base64.b64encode(public).decode(),
                          "signer_id": "go.example", "signer_type": "mirror",
                          "not_before": None, "not_after": None, "revoked_at": None}])["k"]


def test_the_notes_of_go_sumdb_note_open() -> None:
    assert key_id("EnochRoot", ENOCH_PUBLIC).hex() == "af0cfe78"
    note = parse_note(GO_TEXT + b"\n" + PETER_LINE + ENOCH_LINE)
    assert note.text == GO_TEXT
    assert [(s.name, s.key_id.hex()) for s in note.signatures] == [
        ("PeterNeumann", "c74f20a3"), ("EnochRoot", "af0cfe78")]
    for sig, public in zip(note.signatures, (GO_PUBLIC, ENOCH_PUBLIC), strict=True):
        assert verify_signature(_go_entry(public).verifier, sig.signature, GO_TEXT)
    # "Invalid signature": four characters inserted in PeterNeumann's base64
    altered = parse_note(GO_TEXT + b"\n" + PETER_LINE[:60] + b"ABCD" + PETER_LINE[60:])
    assert not verify_signature(_go_entry(GO_PUBLIC).verifier, altered.signatures[0].signature,
                                GO_TEXT)  # fmt: skip
    # "Duplicated verified and unverified signatures": repeated lines are still a note
    repeated = PETER_LINE * 2 + ENOCH_LINE * 2 + ENOCH_LINE[:60] + b"ABCD" + ENOCH_LINE[60:]
    assert len(parse_note(GO_TEXT + b"\n" + repeated).signatures) == 5
    # "Invalid encoded message syntax", and "too many signatures" (101)
    for bad in (GO_TEXT, GO_TEXT + b"\n", GO_TEXT + b"\n" + PETER_LINE[:-1],
                b"\x01" + GO_TEXT + b"\n" + PETER_LINE, b"\xff" + GO_TEXT + b"\n" + PETER_LINE,
                GO_TEXT + b"\n" + PETER_LINE.replace(b"PeterNeumann", b"Bad Name")[:-1],
                GO_TEXT + b"\n" + PETER_LINE + b"Unexpected line.\n",
                GO_TEXT + b"\n" + PETER_LINE * 101):  # fmt: skip
        with pytest.raises(CheckpointError, match="malformed"):
            parse_note(bad)


def test_sign_and_verify_a_checkpoint() -> None:
    note = sign_checkpoint(Checkpoint(ORIGIN, 1204, ROOT), test_key("registry"))
    text, _, sigs = note.partition(b"\n\n")
    assert text + b"\n" == f"{ORIGIN}\n1204\n{base64.b64encode(ROOT).decode()}\n".encode()
    assert sigs.startswith(f"\u2014 {ORIGIN} ".encode()) and sigs.endswith(b"\n")
    raw = base64.b64decode(sigs.split(b" ")[-1])
    assert raw[:4] == key_id(ORIGIN, test_key("registry").public_key) and len(raw) == 68
    verified = verify_checkpoint(note, test_keyring())
    assert verified.checkpoint == Checkpoint(ORIGIN, 1204, ROOT)
    assert verified.signers == ("test-registry",)
    # extension lines and the empty tree
    cp = Checkpoint("registry.test.invalid", 0, hashlib.sha256(b"").digest(), ("ext one",))
    again = verify_checkpoint(sign_checkpoint(cp, test_key("registry-2")), test_keyring())
    assert again.checkpoint == cp and again.signers == ("test-registry-2",)


def test_who_may_sign() -> None:
    assert may_sign("pith_registry", "registry.test.invalid", "registry.test.invalid")
    assert may_sign("mirror", "mirror.test.invalid", "mirror.test.invalid/a/b")
    assert not may_sign("pith_registry", "registry.test.invalid", "registry.test.invalidx")
    assert not may_sign("pith_registry", "registry.test.invalid", "other.test.invalid")
    assert not may_sign("author", "author.test.invalid", "author.test.invalid")
    with pytest.raises(CheckpointError, match=r"checkpoint\.key") as caught:
        sign_checkpoint(Checkpoint(ORIGIN, 1, ROOT), test_key("mirror"))
    assert caught.value.exit_status == EXIT_BAD_INPUT
    with pytest.raises(CheckpointError, match="malformed"):
        sign_checkpoint(Checkpoint("has space", 1, ROOT), test_key("registry"))


def _refused(data: bytes, detail: str, **kwargs: object) -> CheckpointError:
    with pytest.raises(CheckpointError) as caught:
        verify_checkpoint(data, kwargs.pop("keyring", test_keyring()), **kwargs)  # type: ignore[arg-type]
    assert caught.value.detail == detail, caught.value
    return caught.value


def test_untrusted_and_forged_checkpoints() -> None:
    note = sign_checkpoint(Checkpoint(ORIGIN, 5, ROOT), test_key("registry"))
    # a keyring without the key, or with it revoked, or with another signer_id
    err = _refused(note, "untrusted", keyring=make_keyring(test_keyring_entries(("author",))))
    assert err.exit_status == EXIT_VERIFY_FAILED
    revoked = test_keyring(registry={"revoked_at": "2026-01-01T00:00:00Z"})
    _refused(note, "untrusted", keyring=revoked)
    _refused(note, "untrusted", keyring=test_keyring(registry={"signer_id": "else.invalid"}))
    _refused(note, "origin", origin="registry.test.invalid/other")
    # the size or root line changed: the signature no longer holds
    _refused(note.replace(b"\n5\n", b"\n6\n"), "bad_signature")
    other = base64.b64encode(hashlib.sha256(b"other").digest())
    _refused(note.replace(base64.b64encode(ROOT), other), "bad_signature")
    # a flipped bit in the signature
    text, _, line = note.partition(b"\n\n")
    raw = bytearray(base64.b64decode(line.split(b" ")[-1]))
    raw[10] ^= 4
    forged = text + b"\n\n" + line.rsplit(b" ", 1)[0] + b" " + base64.b64encode(raw) + b"\n"
    _refused(forged, "bad_signature")
    # signed by a key the keyring trusts but under another name: not a known key
    renamed = text + b"\n\n" + line.replace(ORIGIN.encode(), b"registry.test.invalid", 1)
    _refused(renamed, "untrusted")


def test_unknown_signatures_are_ignored() -> None:
    note = sign_checkpoint(Checkpoint(ORIGIN, 5, ROOT), test_key("registry"))
    witness = f"\u2014 witness.example {base64.b64encode(b'abcd' + bytes(64)).decode()}\n"
    assert verify_checkpoint(note + witness.encode(), test_keyring()).signers == (
        "test-registry",)
    # a second valid signature by another allowed key is reported too
    text = Checkpoint(ORIGIN, 5, ROOT).text()
    second = sign_note(text, ORIGIN, test_key("registry-2")).line().encode()
    assert verify_checkpoint(note + second, test_keyring()).signers == (
        "test-registry", "test-registry-2")


@pytest.mark.parametrize("data", [
    b"",
    "no blank line\n\u2014 a AAAA\n".encode(),
    "o\n1\n{r}\n\n\u2014 o QUFBQUFB".encode(),  # no final newline
    b"o\n1\n{r}\n\n- o QUFBQUFB\n",  # not an em dash
    "o\n1\n{r}\n\n\u2014 o+x QUFBQUFB\n".encode(),  # '+' in the key name
    "o\n1\n{r}\n\n\u2014 o QUFB\n".encode(),  # fewer than 5 bytes
    "o\n1\n{r}\n\n\u2014 o QUFBQUFB=\n".encode(),  # not canonical base64
    "o\t\n1\n{r}\n\n\u2014 o QUFBQUFB\n".encode(),  # a control character
    b"\xff\n\n\xe2\x80\x94 o QUFBQUFB\n",  # not UTF-8
    "o\n01\n{r}\n\n\u2014 o QUFBQUFB\n".encode(),  # a leading zero
    "o\n1\nAAAA\n\n\u2014 o QUFBQUFB\n".encode(),  # a root of 3 bytes
    "o\n1\n\n\u2014 o QUFBQUFB\n".encode(),  # two lines
    "o\n1\n{r}\n\nx\n\n\u2014 o QUFBQUFB\n".encode(),  # an empty line in the text
])  # fmt: skip
def test_malformed_notes(data: bytes) -> None:
    data = data.replace(b"{r}", base64.b64encode(ROOT))
    err = _refused(data, "malformed")
    assert err.exit_status == EXIT_BAD_INPUT


def test_checkpoint_text_round_trip() -> None:
    cp = Checkpoint("o", 18446744073709551615 // 10, ROOT, ("a", "b c"))
    assert parse_checkpoint_text(cp.text()) == cp


def test_a_tree_size_or_index_is_ascii_decimal_without_a_leading_zero() -> None:
    # The one reading of sizes and indexes, for checkpoints and proof files alike.
    assert decimal_of("0") == 0
    assert decimal_of("1204") == 1204
    assert decimal_of(str(2**63 - 1)) == 2**63 - 1  # Go's int64, tlog.Tree.N
    for text in ("", "01", "00", "-1", "+1", " 1", "1 ", "1_000", "9" * 20, "\u0661", "0x1",
                 str(2**63), "9" * 19):  # fmt: skip
        assert decimal_of(text) is None, text  # int() alone would take some of these


def test_a_tree_of_more_than_2_63_minus_1_leaves_is_neither_signed_nor_accepted() -> None:
    """Go's golang.org/x/mod/sumdb/tlog reads a tree size as an int64: a checkpoint of
    2**63 leaves, which pithlog signed and verified, is one a Go client refuses."""
    assert MAX_TREE_SIZE == 2**63 - 1
    largest = Checkpoint(ORIGIN, MAX_TREE_SIZE, ROOT)
    assert verify_checkpoint(sign_checkpoint(largest, test_key("registry")),
                             test_keyring()).checkpoint == largest  # fmt: skip
    over = Checkpoint(ORIGIN, MAX_TREE_SIZE + 1, ROOT)
    with pytest.raises(CheckpointError, match="malformed"):
        sign_checkpoint(over, test_key("registry"))
    text = over.text()
    note = Note(text, (sign_note(text, ORIGIN, test_key("registry")),)).encoded()
    err = _refused(note, "malformed")
    assert "2**63-1" in err.message


def test_an_empty_tree_has_the_empty_root_only() -> None:
    """A size-0 checkpoint with another root was accepted by a mirror, which then called
    the log's next honest checkpoint a split view: no proof holds from such a tree."""
    empty = hashlib.sha256(b"").digest()
    assert parse_checkpoint_text(Checkpoint("o", 0, empty).text()).root == empty
    with pytest.raises(CheckpointError) as caught:
        parse_checkpoint_text(Checkpoint("o", 0, ROOT).text())
    assert caught.value.code == "checkpoint.malformed" and "RFC 9162" in caught.value.message


def test_the_number_of_signature_lines_and_the_size_of_a_note_are_bounded() -> None:
    note = sign_checkpoint(Checkpoint(ORIGIN, 5, ROOT), test_key("registry"))
    unknown = f"\u2014 witness.example {base64.b64encode(b'abcd' + bytes(64)).decode()}\n"
    most = note + unknown.encode() * (MAX_SIGNATURES - 1)
    assert verify_checkpoint(most, test_keyring()).signers == ("test-registry",)
    err = _refused(most + unknown.encode(), "malformed")
    assert f"more than {MAX_SIGNATURES} signature lines" in err.message
    extension = b"x" * (MAX_NOTE_BYTES - len(note) + 1)
    large = sign_checkpoint(Checkpoint(ORIGIN, 5, ROOT, (extension.decode(),)),
                            test_key("registry"))  # fmt: skip
    assert f"limited to {MAX_NOTE_BYTES} bytes" in _refused(large, "malformed").message


def _signed_with(extra_line: bytes) -> bytes:
    return sign_checkpoint(Checkpoint(ORIGIN, 5, ROOT), test_key("registry")) + extra_line


@pytest.mark.parametrize("line", [
    "\u2014  QUFBQUFB\n",  # an empty key name
    "\u2014witness.example QUFBQUFB\n",  # no space after the em dash
    "\u2014 witness.example QUFBQQ==\n",  # a key ID and no signature
    "\u2014 witness.example QUFBQUFB",  # the last line has no newline
])  # fmt: skip
def test_every_signature_line_follows_the_signed_note_grammar(line: str) -> None:
    # c2sp.org/signed-note: a line the grammar refuses makes the note malformed, even
    # next to a valid signature; it is not an unknown key's line to be ignored
    _refused(_signed_with(line.encode()), "malformed")


def test_the_signatures_follow_the_last_blank_line() -> None:
    note = parse_note("a\n\nb\n\n\u2014 k QUFBQUFB\n".encode())
    assert note.text == b"a\n\nb\n" and [s.name for s in note.signatures] == ["k"]


def test_a_note_of_exactly_the_size_limit_is_read() -> None:
    base = sign_checkpoint(Checkpoint(ORIGIN, 5, ROOT), test_key("registry"))
    fill = MAX_NOTE_BYTES - len(base) - 1  # an extension line of `fill` bytes and "\n"
    for size, extension in ((MAX_NOTE_BYTES, "x" * fill), (MAX_NOTE_BYTES + 1, "x" * (fill + 1))):
        note = sign_checkpoint(Checkpoint(ORIGIN, 5, ROOT, (extension,)), test_key("registry"))
        assert len(note) == size
        if size <= MAX_NOTE_BYTES:
            assert verify_checkpoint(note, test_keyring()).signers == ("test-registry",)
        else:
            _refused(note, "malformed")


def test_a_key_signing_twice_is_one_signer_and_a_short_signature_fails() -> None:
    note = sign_checkpoint(Checkpoint(ORIGIN, 5, ROOT), test_key("registry"))
    line = note.partition(b"\n\n")[2]
    assert verify_checkpoint(note + line, test_keyring()).signers == ("test-registry",)
    # the known key's ID with 63 bytes of signature: a signature that fails, no crash
    kid = key_id(ORIGIN, test_key("registry").public_key)
    short = f"\u2014 {ORIGIN} {base64.b64encode(kid + bytes(63)).decode()}\n".encode()
    _refused(note + short, "bad_signature")
    with pytest.raises(CheckpointError, match="malformed"):
        sign_note(b"text\n", "a b", test_key("registry"))
