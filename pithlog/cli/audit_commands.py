"""``pithlog audit URL``: mirror a registry, then hold it to what its own log implies
(docs/evidence.md, "Audit")."""

from __future__ import annotations

import argparse
import time
from typing import Any

from pithlog.cli.edge import (
    Bar,
    StoreParser,
    at_least,
    evidence_folder,
    json_line,
    keyring_option,
    net_module,
    open_store_reached,
    progress_option,
    seconds_or_zero,
    served_url,
    show_progress,
)
from pithlog.cli.streams import Out, read_keyring
from pithlog.errors import EXIT_OK, EXIT_VERIFY_FAILED, MirrorError
from pithlog.transparency.checkpoint import parse_checkpoint_text, parse_note


def cmd_audit(args: argparse.Namespace, out: Out) -> int:
    """Mirror the registry at URL, compare every state it serves, prove every equivocation."""
    audit = net_module("audit", "pithlog audit")
    mirror = net_module("mirror", "pithlog audit")
    served_url(args.url)
    # --max-time counts from here: the mirror's time (step 1) is taken from the states';
    # an hour unless told (0: no limit), as a sync from a URL
    limit = audit.MAX_SECONDS if args.max_time is None else args.max_time
    ends = time.monotonic() + limit if limit else None
    keyring = read_keyring(args.keyring)
    evidence = evidence_folder(args.evidence_dir)
    counts = {"state_mismatch": 0, "state_unanswered": 0, "state_not_checked": 0,
              "equivocation": 0, "split_view": 0}  # fmt: skip

    def report(finding: Any) -> None:
        # one state_not_checked line stands for every pith left: its count is theirs
        counts[finding.kind] += finding.doc["count"] if finding.kind == "state_not_checked" else 1
        out.write(json_line({"finding": finding.kind, **finding.doc}))

    # every answer of the origin is held to the audit's time, step 1's and the catch-ups'
    # too: each batch a mirror commits is a transaction, and a mirror cut short is resumed
    # by the next run; stopped is "max_time" when the time ran out before step 1 was done
    stopped = None
    begun: list[Any] = []  # the report of step 1's pass, once its checkpoint is accepted
    audited: Any = None  # step 1's report (mirror.MirrorReport)
    mirrored: Any = None  # the last pass's
    compared = None  # the size whose every pith was compared after its last leaf there
    walk = audit.Walk()
    opened = False
    try:
        with mirror.Origin(args.url, ends=ends) as origin, \
                open_store_reached(args, lambda: mirror.verified_checkpoint(
                    origin, keyring, args.origin)) as store:  # fmt: skip
            opened = True
            bar = Bar(out, show_progress(args, out), "audit: mirror", unit="leaf")
            out.bar = bar
            try:
                mirrored = mirror.mirror_once(store, origin, keyring, args.origin, evidence,
                                              progress=bar, begun=begun.append)  # fmt: skip
            except MirrorError as exc:
                if audit.out_of_time(exc, ends):
                    # what was verified is committed, batch by batch; nothing is compared
                    # with a log held in part, nor proven against a tree not held whole
                    stopped = "max_time"
                    _mirror_stopped(out, store, begun)
                elif exc.code != "mirror.split_view":
                    raise
                else:
                    report(audit.split_view(exc))
                mirrored = None
            finally:
                bar.close()
                out.bar = None
            # the checkpoint whose every pith is compared (at its size or later)
            audited = mirrored
            if mirrored is not None:
                # the states compared and the keys the proofs carry are K's: a mirror already up
                # to date appended nothing, so a store reduced under another keyring would be
                # compared as it was (and a signer K lacks would have no entry to carry); the
                # change is made as append makes it, or refused with store.keyring_changed
                applied = store.apply_keyring(keyring)
                if applied is not None:
                    out.say(f"audit: the keyring changed ({applied.keys} key(s)): "
                            f"{applied.copies} stored copies judged again first")  # fmt: skip
                bar = Bar(out, show_progress(args, out), "audit: states")
                out.bar = bar
                # the checkpoint whose tree the store holds whole, which step 3 proves against:
                # a catch-up that stops midway has accepted a newer one, and fetched only part
                # of its leaves
                held_whole = store.accepted_checkpoint(mirrored.origin)

                def catch_up() -> bool:
                    # a registry that takes submissions grows while it is audited: its newer
                    # checkpoint mirrored (verified as the first), a differing state is
                    # compared again with the longer log
                    nonlocal mirrored, held_whole
                    held = store.tree_size()
                    mirrored = mirror.mirror_once(store, origin, keyring, args.origin, evidence)
                    # the checkpoint accepted, unless it is one a stopped pass accepted and this
                    # one, served an older checkpoint (a cache's), did not complete
                    accepted = store.accepted_checkpoint(mirrored.origin)
                    if accepted is not None and _size(accepted) <= store.tree_size():
                        held_whole = accepted
                    # grown, not a newer checkpoint accepted: a catch-up that stopped midway
                    # (its leaves not fetched) accepted the checkpoint the next one completes,
                    # and the state compared before it was of the shorter tree
                    return store.tree_size() > held

                try:
                    for finding in audit.compare_states(store, origin, progress=bar,
                                                        max_unanswered=args.max_unanswered,
                                                        catch_up=catch_up, walk=walk,
                                                        ends=ends):  # fmt: skip
                        report(finding)
                    # the piths the catch-ups touched all compared after them: the last tree's
                    # every pith was; too many of them, the first tree's only
                    compared = mirrored.size if walk.followed else audited.size
                except MirrorError as exc:
                    if exc.code != "mirror.split_view":
                        raise
                    report(audit.split_view(exc))  # no state is compared with a split log
                finally:
                    bar.close()
                    out.bar = None
                assert held_whole is not None  # mirror_once accepted it
                for finding in audit.prove_equivocations(store, keyring, held_whole, evidence):
                    report(finding)
    except MirrorError as exc:
        if opened or not audit.out_of_time(exc, ends):
            raise
        stopped = "max_time"  # no checkpoint fetched in time: no store made, none mirrored
    # size: the checkpoint first accepted; latest_size: the last, which the proofs are
    # against; compared_size: the one whose every pith was compared after its last leaf
    # there (or is counted in a finding), null when a split view ended the comparing;
    # stopped: why states were left not asked for (max_unanswered, max_time), or null
    # (a mirror cut short by the time: the checkpoint it accepted, if it did)
    stopped = stopped or walk.stopped
    first = audited if audited is not None else next(iter(begun), None)
    summary = {"summary": True, "origin": None if first is None else first.origin,
               "size": None if first is None else first.size,
               "latest_size": None if mirrored is None else mirrored.size,
               "compared_size": compared, "stopped": stopped, **counts}  # fmt: skip
    out.write(json_line(summary))
    # a state left unanswered is no evidence against the registry, but the audit did not
    # see it serve what its log implies: not a pass (the counts tell the two apart)
    found = sum(counts.values())
    out.say(f"audit: {args.url}: {counts['state_mismatch']} state mismatch(es), "
            f"{counts['state_unanswered']} state(s) unanswered, "
            f"{counts['state_not_checked']} not checked, "
            f"{counts['equivocation']} equivocation(s) proven, {counts['split_view']} split "
            f"view(s)" + {None: "", "max_time": "; stopped short: --max-time ran out",
                          "max_unanswered": "; stopped short: --max-unanswered states in a "
                          "row went unanswered"}[stopped])  # fmt: skip
    # stopped short, the audit did not see the registry serve what its log implies: not a
    # pass, though the mirror cut short has no finding to count
    return EXIT_VERIFY_FAILED if found or stopped else EXIT_OK


def _mirror_stopped(out: Out, store: Any, begun: list[Any]) -> None:
    """Says how far step 1's mirror got when the audit's time ran out."""
    if not begun:
        out.say("audit: --max-time ran out before the registry's checkpoint was accepted: "
                "nothing mirrored")  # fmt: skip
        return
    report = begun[0]
    out.say(f"audit: --max-time ran out while mirroring {report.origin} at size "
            f"{report.size}: the store holds {store.tree_size()} leaves ({report.held_before} "
            "before), every one verified and committed; the next audit continues from "
            "there")  # fmt: skip


def _size(note: bytes) -> int:
    """The tree size of a signed checkpoint (C2SP tlog-checkpoint)."""
    return parse_checkpoint_text(parse_note(note).text).size


def add_commands(sub: Any, store_parser: StoreParser) -> None:
    """The subcommand parsers of this group."""
    p = store_parser(
        "audit",
        help="mirror a registry and check every state it serves against its own log",
        description="What an auditor runs against a registry (docs/evidence.md): mirror the "
        "log served at URL into the store (or update the mirror; every tile, entry and copy "
        "verified), then fetch every state document the registry serves (/state/<pith>) and "
        "compare it, byte for byte, with the one the mirrored log implies under KEYRING "
        "(none for a pith the log leaves pending: a state served for one is a mismatch), "
        "and write an equivocation proof for every equivocated slot into --evidence-dir. A "
        "state that differs first brings the mirror up to the registry's newer checkpoint, "
        "if it has one, and is compared again (a registry that takes submissions grows "
        "while audited); the piths the newer leaves touched that were compared before "
        "them, or not at all, are compared after the others (100,000 at most), and the "
        "summary's compared_size is the tree whose every pith was compared. "
        "Prints one JSON line per finding (state_mismatch, state_unanswered, equivocation, "
        "split_view; state_not_checked once --max-unanswered states in a row went "
        "unanswered or --max-time ran out), then a summary line (its stopped member says "
        "which, or is null); exit 0 when the registry serves exactly what its "
        "log implies and nobody equivocated, 1 otherwise (a state it left unanswered or "
        "not checked too, or a mirror --max-time cut short). A log that cannot be "
        "mirrored ends the audit with the mirror's error, as in pithlog mirror (no "
        "summary; 2 when it could not be read).",
    )
    p.add_argument("url", metavar="URL", help="the registry's served log")
    keyring_option(p)
    p.add_argument("--origin", metavar="NAME", help="require this origin of the checkpoint")
    p.add_argument("--evidence-dir", default=".", metavar="DIR",
                   help="where proofs and split-view evidence are written (default: .)")
    p.add_argument("--max-unanswered", type=at_least(0), default=16, metavar="N",
                   help="stop asking for states after N in a row went unanswered (a "
                   "time-out each can take a minute); the rest are counted as "
                   "state_not_checked (default 16; 0: ask for every state)")  # fmt: skip
    p.add_argument("--max-time", type=seconds_or_zero, metavar="SECONDS",
                   help="stop asking for states SECONDS after the audit began (up to "
                   "86,400), an answer in flight cut there; the rest are counted as "
                   "state_not_checked and the equivocations are still proven. The mirror "
                   "of the log and its catch-ups are held to it too: a mirror cut short "
                   "ends the audit (what it committed stays, and the next audit continues "
                   "from it; the summary's stopped max_time, exit 1) (default 3,600, as "
                   "sync's; 0: no limit, for a log whose states take longer to ask for). "
                   "Each answer has "
                   "a deadline, but a registry may answer every one just in time, and "
                   "--max-unanswered counts states in a row only: a registry that lets "
                   "every other request time out holds the audit about 30 s a pith")  # fmt: skip
    progress_option(p, "the leaves mirrored and the states compared")
    p.set_defaults(func=cmd_audit)
