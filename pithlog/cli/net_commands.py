"""The commands of the log on the network: ``serve`` (docs/network.md)."""

from __future__ import annotations

import argparse
import contextlib
import gc
from collections.abc import Iterator
from typing import Any

from pithlog.cli.edge import StoreParser, net_module, seconds, store_path
from pithlog.cli.streams import Out, warn_if_exposed
from pithlog.cli.witness_commands import distinct_witnesses
from pithlog.errors import EXIT_OK, UsageError
from pithlog.parallel.cores import MOST_CORES


def cmd_serve(args: argparse.Namespace, out: Out) -> int:
    """Serve the store's log over HTTP until interrupted."""
    server = net_module("server", "pithlog serve")
    if args.witness_url and (args.witness or args.witness_keyring is None):
        raise UsageError("arguments", "--witness-url (witnesses cosigning this log's "
                         "checkpoints) needs --witness-keyring, and is not for a "
                         "witness")  # fmt: skip
    if args.witness_keyring is not None and not args.witness_url:
        raise UsageError("arguments", "--witness-keyring names the keys of the witnesses "
                         "given with --witness-url: give both")  # fmt: skip
    if args.witness:
        if args.submit or args.keyring is None or args.origin is not None:
            raise UsageError("arguments", "--witness takes --keyring (the logs it witnesses), "
                             "no --submit and no --origin (it cosigns the origins its "
                             "keyring names)")  # fmt: skip
    elif args.origin is None:
        raise UsageError("arguments", "--origin is required (the log's origin), unless "
                         "--witness")  # fmt: skip
    elif args.submit != (args.keyring is not None):
        raise UsageError("arguments", "--submit and --keyring go together: the keyring "
                         "judges what is submitted")  # fmt: skip
    # the bounds of POST /submit (POST /sync has its own, fixed): without --submit they
    # would be ignored, so say so rather than serve as if they held
    limits = {"max_body": args.max_body, "max_lines": args.max_lines,
              "body_seconds": args.body_timeout, "max_pending": args.max_pending}  # fmt: skip
    limits = {name: value for name, value in limits.items() if value is not None}
    if limits and not args.submit:
        raise UsageError("arguments", "--max-body, --max-lines, --body-timeout and "
                         "--max-pending bound POST /submit: give them with --submit, or "
                         "leave them out")  # fmt: skip
    if not 1 <= args.workers <= MOST_CORES:
        # each worker is a process: a mistyped count must not start thousands (as --jobs)
        raise UsageError("arguments", f"--workers must be from 1 to {MOST_CORES}")
    if any(limits.get(name, 1) < 1 for name in ("max_body", "max_lines", "max_pending")):
        raise UsageError("arguments", "--max-body, --max-lines and --max-pending are "
                         "positive")  # fmt: skip
    # a URL given twice is one witness, asked once
    args.witness_url = distinct_witnesses(args.witness_url)
    if args.witness_quorum is not None and not 1 <= args.witness_quorum <= len(
        args.witness_url
    ):  # a quorum of 0 or less would publish checkpoints no witness cosigned
        raise UsageError("arguments", "--witness-quorum is between 1 and the number of "
                         "--witness-url given")  # fmt: skip
    settings = server.Settings(
        store=store_path(args), key=args.key, origin=args.origin or "", keyring=args.keyring,
        **limits, witness=args.witness,
        witness_urls=tuple(args.witness_url), witness_keyring=args.witness_keyring,
        witness_quorum=args.witness_quorum or 0,
    )  # fmt: skip
    with collector_running():
        server.serve(settings, args.listen, args.workers,
                     lambda url: out.say(f"serve: listening on {url}"),
                     lambda path, status: warn_if_exposed(path, status, out))  # fmt: skip
    return EXIT_OK


@contextlib.contextmanager
def collector_running() -> Iterator[None]:
    """Run with Python's cyclic garbage collector on (every command runs with it paused,
    :func:`pithlog.cli.program._collector_paused`), restored after.

    A server answers requests for as long as it runs, and Starlette, anyio and Jinja leave
    reference cycles on every one (exceptions whose tracebacks hold their frames, template
    macros): about 130 objects a request, holding what the request held. Only the collector
    frees them: without it, one worker grew by 250 KB with every record page it served
    (400 MB over 6,000 pages)."""
    was_enabled = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        if not was_enabled:
            gc.disable()


def add_commands(sub: Any, store_parser: StoreParser) -> None:
    """The subcommand parsers of this group."""
    p = store_parser(
        "serve",
        help="serve the store's log over HTTP (C2SP tlog-tiles, states, proofs, submissions)",
        description="Serve the store's log over HTTP (docs/network.md): the signed "
        "checkpoint, tlog-tiles tiles and entry bundles, copies, state documents and proofs, "
        "and with --submit, POST /submit. Prints 'serve: listening on http://HOST:PORT' on "
        "stderr once it is ready (with --workers N, once every worker is); stops on Ctrl-C "
        "or SIGTERM.",
    )
    p.add_argument("--listen", default="127.0.0.1:8080", metavar="HOST:PORT",
                   help="address to listen on (default 127.0.0.1:8080; port 0 picks a free "
                   "port)")  # fmt: skip
    p.add_argument("--key", required=True, metavar="KEYFILE",
                   help="the log's private key: signs the published checkpoints (with "
                   "--witness: the witness's key, which cosigns)")  # fmt: skip
    p.add_argument("--origin", metavar="ORIGIN",
                   help="the checkpoints' origin line (and key name); required unless "
                   "--witness")  # fmt: skip
    p.add_argument("--witness", action="store_true",
                   help="serve as a witness (C2SP tlog-witness, docs/witness.md): POST "
                   "/add-checkpoint for the logs --keyring allows; the store keeps what it "
                   "last cosigned")  # fmt: skip
    p.add_argument("--submit", action="store_true",
                   help="accept POST /submit (needs --keyring)")
    p.add_argument("--keyring", metavar="KEYRING",
                   help="keyring JSON file judging submissions (with --submit), or naming "
                   "the logs a witness follows (with --witness)")  # fmt: skip
    p.add_argument("--witness-url", action="append", default=[], metavar="URL",
                   help="a witness (C2SP tlog-witness) that cosigns each checkpoint before it "
                   "is published; repeatable (docs/witness.md)")  # fmt: skip
    p.add_argument("--witness-keyring", metavar="KEYRING",
                   help="with --witness-url: the keyring naming the witness keys")
    p.add_argument("--witness-quorum", type=int, metavar="N",
                   help="cosignatures a checkpoint needs to be published (default: one per "
                   "--witness-url); until then the last cosigned one stays published")  # fmt: skip
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="worker processes (default 1), each listening on the address; "
                        "with --submit, each judges "
                        "submissions in its share of the cores (one per core suits many "
                        "small submitters, one suits large batches: docs/network.md)")
    p.add_argument("--max-body", type=int, metavar="BYTES",
                   help="with --submit: largest POST /submit body (default 8 MiB; larger: "
                   "413)")  # fmt: skip
    p.add_argument("--max-lines", type=int, metavar="N",
                   help="with --submit: most lines per POST /submit (default 10,000; more: "
                   "413)")  # fmt: skip
    p.add_argument("--body-timeout", type=seconds, metavar="SECONDS",
                   help="with --submit: time to receive a POST /submit body (default 30, at "
                   "most 86,400; slower: 408)")  # fmt: skip
    p.add_argument("--max-pending", type=int, metavar="N",
                   help="with --submit: POST /submit requests checked or committed at once "
                   "per worker, each once its body is whole (default 32; more wait, then "
                   "503); bodies held stay under N x --max-body bytes")  # fmt: skip
    p.set_defaults(func=cmd_serve)
