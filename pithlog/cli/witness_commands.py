"""Witnesses at the command line (docs/witness.md): ``checkpoint --witness URL --quorum N``
collects cosignatures before it prints the checkpoint."""

from __future__ import annotations

import argparse

from pithlog.cli.edge import net_module
from pithlog.cli.streams import Out, read_keyring
from pithlog.errors import UsageError, shown
from pithlog.store import Store
from pithlog.transparency.witness import may_witness


def add_witness_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--witness", action="append", default=[], metavar="URL",
                   help="ask the witness at URL (C2SP tlog-witness) to cosign; "
                   "repeatable")  # fmt: skip
    p.add_argument("--quorum", type=int, metavar="N",
                   help="cosignatures required before the checkpoint is printed (default: "
                   "one per --witness)")  # fmt: skip
    p.add_argument("--keyring", metavar="KEYRING",
                   help="with --witness: the keyring naming the witness keys (mirror or "
                   "pith_registry keys; a cosignature's key name is the key's "
                   "signer_id)")  # fmt: skip


def distinct_witnesses(urls: list[str]) -> list[str]:
    """``urls`` with each witness once, in the order given. The client asks
    ``URL/add-checkpoint`` with URL's trailing slashes cut, so ``https://w.example`` and
    ``https://w.example/`` are one witness: counted as two, their default quorum of two
    could never be met by its one key."""
    first: dict[str, str] = {}
    for url in urls:
        first.setdefault(url.rstrip("/") or url, url)
    return list(first.values())


def check_cosigning(args: argparse.Namespace) -> int:
    """The quorum of ``--witness``/``--quorum``/``--keyring`` (0 without ``--witness``),
    checked before any work; a URL given twice is one witness, asked once."""
    if not args.witness:
        if args.quorum is not None or args.keyring is not None:
            # without --witness they would be ignored: say so rather than sign as if
            raise UsageError("arguments", "--quorum and --keyring need --witness URL")
        return 0
    args.witness = distinct_witnesses(args.witness)
    if not args.keyring:
        raise UsageError("arguments", "--witness needs --keyring, which names the witness keys")
    quorum = len(args.witness) if args.quorum is None else args.quorum
    if not 1 <= quorum <= len(args.witness):
        raise UsageError("arguments", f"--quorum is between 1 and the {len(args.witness)} "
                         "--witness given")  # fmt: skip
    # httpx comes with the pithlog[net] extra: without it, one line naming the extra
    net_module("witness_client", "checkpoint --witness")
    return int(quorum)


def cosigned(args: argparse.Namespace, store: Store, note: bytes, size: int, out: Out) -> bytes:
    """``note`` with the cosignatures of the ``--witness`` URLs, once at least ``--quorum``
    distinct keyring witness keys cosigned; ``note`` itself without ``--witness``."""
    quorum = check_cosigning(args)
    if not quorum:
        return note
    witnesses = [e for e in read_keyring(args.keyring).values() if may_witness(e)]
    # httpx only for a checkpoint that asks witnesses (the CLI starts without it; without
    # the extra, check_cosigning has already refused --witness)
    from pithlog.net.witness_client import collect

    def proof_from(old: int) -> list[bytes]:
        return store.consistency_path(old, size)[1]

    result, asked = collect(args.witness, note, size, proof_from, witnesses, quorum)
    for a in asked:
        said = ", ".join(shown(c.key_id) for c in a.cosigned) or f"nothing ({a.problem})"
        out.say(f"checkpoint: witness {a.url} cosigned: {said}")
    return result
