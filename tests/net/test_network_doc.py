"""The numbers docs/network.md states, tied to the constants they describe: the limits
tables of ``serve`` and of ``POST /sync``, compression and caching. A constant changed
without its row (or a row without its constant) fails here."""

from __future__ import annotations

import re
from pathlib import Path

from pithlog.cli.edge import MOST_SECONDS
from pithlog.net import (
    answers,
    app,
    encoding,
    http_head,
    served_log,
    server,
    state_builds,
    submit,
    sync,
    sync_http,
    syncmsg,
)
from pithlog.net.body_bytes import ANSWER_PIECE

DOC = (Path(__file__).parents[2] / "docs" / "network.md").read_text("utf-8")


def size(n: int) -> str:
    """A byte count as the doc writes it: ``64 MiB``, ``256 KiB``."""
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    raise AssertionError(f"{n} is not a whole number of KiB")


def row(starts: str) -> str:
    """The one table row whose first cell begins with ``starts``."""
    found = [line for line in DOC.splitlines() if line.startswith("| " + starts)]
    assert len(found) == 1, f"{len(found)} rows begin with {starts!r}"
    return found[0]


def why(name: str) -> str:
    """The paragraph of a "Why each ... limit is what it is" subsection headed by ``name``
    in bold, joined on one line (its list items included)."""
    found = [part for part in DOC.split("\n\n**")[1:] if part.startswith(name + ".**")]
    assert len(found) == 1, f"{len(found)} paragraphs are headed {name!r}"
    return " ".join(found[0].split("\n#")[0].split())


def says(text: str, *parts: str) -> None:
    for part in parts:
        assert part in text, f"{part!r} not in {text[:200]!r}..."


def test_the_submit_limits_are_the_defaults() -> None:
    limits = submit.Limits()
    says(row("body of `POST /submit`"), size(limits.max_body))
    says(row("lines per `POST /submit`"), f"{limits.max_lines:,}")
    says(why("lines per `POST /submit`"), f"A body of {size(submit.SPLIT_APART_BYTES)} or more",
         "(`SPLIT_APART_BYTES`")  # fmt: skip
    assert MOST_SECONDS == 86_400.0
    says(row("time to receive a `POST /submit` body"), f"{limits.body_seconds:g} s",
         "at most a day")  # fmt: skip
    says(row("`POST /submit` requests checked"), f"| {limits.max_pending} |")
    says(row("bytes of `POST /submit` bodies"),
         f"({size(limits.max_pending * limits.max_body)} by default)")  # fmt: skip


def test_the_state_rows_are_state_builds_constants() -> None:
    waited = f"after {state_builds.WAIT_SECONDS:g} s"
    says(row("state documents built at once"), f"| {state_builds.STATE_BUILDS} (`STATE_BUILDS`",
         waited)  # fmt: skip
    says(row("bytes of `/state/` answers"), f"{size(state_builds.STATE_BYTES)} (`STATE_BYTES`)",
         f"an answer of {size(ANSWER_PIECE)} or less is not counted",
         f"at most {state_builds.STATE_BUILDS} answers at once",
         f"when {state_builds.STATE_BUILDS} wait already", waited)  # fmt: skip


def test_the_copy_row_is_the_copies_room() -> None:
    text = row("bytes of `/copy/`, `/event/` and `/copies/` answers")
    says(text, f"{size(served_log.COPY_BYTES)} (`COPY_BYTES`",
         f"an answer of {size(ANSWER_PIECE)} or less is not counted",
         f"(`COPIES_CHUNK_MOST`, about {round(app.COPIES_CHUNK_MOST / (1 << 20))} MiB)",
         f"at most {served_log.COPY_WAITERS} answers at once (`COPY_WAITERS`)",
         f"when {served_log.COPY_WAITERS} wait already",
         f"after {state_builds.WAIT_SECONDS:g} s")  # fmt: skip
    assert size(app.COPIES_READ_BYTES) == "1 MiB"
    says(DOC, "streamed about 1 MiB of copies per store read (`COPIES_READ_BYTES`")


def test_the_connection_rows_are_the_server_settings() -> None:
    says(row("request head"), size(http_head.MAX_HEAD_BYTES))
    says(row("connections and requests in flight per worker"), f"{server.LIMIT_CONCURRENCY:,}")
    says(row("idle keep-alive connection"), f"| {server.TIMEOUT_KEEP_ALIVE} s |")
    says(row("time to send a request head"), f"{http_head.HEAD_SECONDS:g} s (`HEAD_SECONDS`)")
    says(row("time an answer waits for its client"),
         f"{http_head.SEND_STALL_SECONDS:g} s (`SEND_STALL_SECONDS`)")  # fmt: skip


def test_the_sync_rows_are_the_sync_constants() -> None:
    message = size(sync.MAX_MESSAGE)
    held = f"{sync_http.MAX_SYNCS} x {message}"
    says(row("request body (one message)"), message)
    says(row("time to receive a request body"), f"{sync_http.BODY_SECONDS:g} s")
    says(row("requests answered at once per worker"), f"{sync_http.MAX_SYNCS} (`MAX_SYNCS`",
         f"after {sync_http.BODY_SECONDS:g} s")  # fmt: skip
    says(row("bytes of `/sync` bodies"), held)
    says(row("bytes of `/sync` answers"), held,
         f"an answer of {size(ANSWER_PIECE)} or less is not counted",
         f"at most {sync_http.MAX_SYNCS} answers at once (`MAX_SYNCS`)",
         f"when {sync_http.MAX_SYNCS} wait already")  # fmt: skip
    says(row("an answer, read by the client"), message)
    says(row("a `list all` answered by listing"), f"{sync.MAX_LISTED:,} short ids")
    says(row("inclusion proofs asked"), f"{sync.MAX_PROOFS:,} (`MAX_PROOFS`)")
    says(row("ranges asked about"), f"{sync.MAX_RANGES:,} (`MAX_RANGES`)")
    says(row("short ids in the item lists"), f"{sync.MAX_ASKED_ITEMS:,} (`MAX_ASKED_ITEMS`)")
    says(row("rounds, reconciliation bytes"),
         f"{sync.MAX_ROUNDS}; {size(sync.MAX_RECONCILE_BYTES)}; {syncmsg.BRANCHES} per range",
         f"{sync.MAX_NEEDED:,} (`--max-copies`, at most {sync.MAX_ORDERED:,})")  # fmt: skip
    says(row("a whole sync"), f"{sync.MAX_SECONDS:,.0f} s (`--max-time`, at most "
         f"{MOST_SECONDS:,.0f})")  # fmt: skip
    assert sync_http.REBUILD_SHARE == 10
    says(" ".join(DOC.split()), "ten times as long as that reading took (`REBUILD_SHARE`")


def test_each_limits_table_is_followed_by_the_why_of_each_row() -> None:
    """The limits tables say per row what is limited, the default, the option and what the
    client gets; the how, the why and the figures measured are in the subsection below
    the table, one paragraph per row in the table's order, headed in bold by (the start
    of) the row's first cell."""
    for section, heading in (("Limits", "Why each limit is what it is"),
                             ("Sync over HTTP and its limits",
                              "Why each sync limit is what it is")):  # fmt: skip
        text = DOC.split(f"\n## {section}\n")[1].split("\n## ")[0]
        table, reasons = text.split(f"\n### {heading}\n")
        cells = [line.split(" | ")[0].removeprefix("| ")
                 for line in table.splitlines() if line.startswith("| ")][1:]  # fmt: skip
        names = re.findall(r"^\*\*(.+?)\.\*\*", reasons, re.MULTILINE)
        assert len(names) == len(cells), section
        for name, cell in zip(names, cells, strict=True):
            assert cell.startswith(name), (name, cell)


def test_compression_and_caching_are_the_constants() -> None:
    prose = " ".join(DOC.split())
    says(prose, f"errors, whatever their size) of {size(encoding.MINIMUM_BYTES)} or more are "
         "compressed with zstd",
         f"level {encoding.LEVEL})",
         f"An answer of {size(encoding.APART_BYTES)} or more",
         f"brotli (quality {encoding.BROTLI_QUALITY})",
         f"a window over {size(encoding.MAX_WINDOW)}")  # fmt: skip
    says(row("`/checkpoint` | the signed checkpoint"), f"`{app.CHECKPOINT_CACHE}` |")
    assert app.IMMUTABLE.endswith("immutable") and app.REVALIDATE == "no-cache"
    assert re.search(rf"keeps the {served_log.FULL_TILES_KEPT:,} full hash\s+tiles", DOC)


def test_the_errors_section_gives_every_status_of_a_code() -> None:
    """Each code with a status of its own (``answers.STATUS``) is in the section's list of
    status codes, with that status: the list once left ``503 serve.stopping`` out."""
    section = " ".join(DOC.split("\n## Errors\n")[1].split("\n## ")[0].split())
    for code, status in answers.STATUS.items():
        named = re.escape(code)
        assert re.search(rf"`{status} {named}`|`{status}` \([^)]*`{named}`", section), code


def test_the_command_line_names_every_option_of_serve() -> None:
    synopsis = DOC.split("\n## The command\n")[1].strip().split("\n\n")[0]
    options = set(re.findall(r"--[a-z][-a-z]*", synopsis))
    for option in ("--listen", "--key", "--origin", "--submit", "--keyring", "--max-body",
                   "--max-lines", "--body-timeout", "--max-pending", "--witness-url",
                   "--witness-keyring", "--witness-quorum", "--workers", "--witness"):  # fmt: skip
        assert option in options, option


def nginx_blocks() -> dict[str, list[list[str]]]:
    """The directives of the nginx example of "Running a registry", by the block they are
    in: ``""`` for those outside any ``location`` (the http and server levels), else the
    location's argument (``/pith/``, ``= /pith/submit``)."""
    text = DOC.split("```nginx\n")[1].split("```")[0]
    blocks: dict[str, list[list[str]]] = {"": []}
    where = ""
    for raw in text.splitlines():
        line = raw.split("#")[0].strip()
        if not line:
            continue
        if line.startswith("location ") and line.endswith("{"):
            where = line.removeprefix("location ").removesuffix("{").strip()
            blocks[where] = []
        elif line.endswith("{"):  # map: its body is no directive
            blocks[""].append(line.removesuffix("{").split())
            where = "map"
        elif line == "}":
            where = ""
        elif where != "map":
            assert line.endswith(";"), line
            blocks[where].append(line.removesuffix(";").split())
    return blocks


def test_the_nginx_example_puts_each_directive_where_nginx_takes_it() -> None:
    """``client_header_timeout`` sat in a ``location``, which nginx refuses ("not allowed
    here"); ``limit_req`` in ``location /`` limited every request, not ``/submit``; the
    zones it named were declared nowhere; and ``proxy_cache`` on ``/state/`` and
    ``/event/`` (``no-cache``: never stored) replaced the client's ``If-None-Match``,
    so no ``304`` came through."""
    blocks = nginx_blocks()
    outside = {d[0]: d for d in blocks[""]}
    assert outside["client_header_timeout"][1] == f"{http_head.HEAD_SECONDS:g}s"
    for where, directives in blocks.items():
        if where:
            names = {d[0] for d in directives}
            assert not names & {"client_header_timeout", "proxy_cache_path",
                                "limit_req_zone", "map"}, where  # fmt: skip
            assert "proxy_pass" in names, where
    limited = {w for w, ds in blocks.items() for d in ds if d[0] == "limit_req"}
    assert limited == {"= /pith/submit", "= /pith/sync"}
    zones = {d[1].removeprefix("zone=") for ds in blocks.values() for d in ds
             if d[0] == "limit_req"}  # fmt: skip
    assert {w.split(":")[0].removeprefix("zone=")
            for w in outside["limit_req_zone"] if w.startswith("zone=")} == zones  # fmt: skip
    cached = {d[1] for ds in blocks.values() for d in ds if d[0] == "proxy_cache"}
    declared = {w.split(":")[0].removeprefix("keys_zone=")
                for w in outside["proxy_cache_path"] if w.startswith("keys_zone=")}  # fmt: skip
    assert declared == cached
    for where in ("/pith/state/", "/pith/event/"):
        assert "proxy_cache" not in {d[0] for d in blocks[where]}, where
    assert app.REVALIDATE == "no-cache"  # what nginx never stores

    def body_cap(where: str) -> str:
        return next(d[1] for d in blocks[where] if d[0] == "client_max_body_size")

    assert body_cap("= /pith/submit") == f"{submit.Limits().max_body >> 20}m"
    assert body_cap("= /pith/sync") == f"{sync.MAX_MESSAGE >> 20}m"


def test_the_nginx_example_takes_the_prefix_off_as_the_client_wrote_it() -> None:
    """``serve`` answers at its root: the ``map`` takes ``/pith`` off ``$request_uri``
    (undecoded, with its query), and every ``proxy_pass`` passes that."""
    text = DOC.split("```nginx\n")[1].split("```")[0]
    pattern, value = re.search(r"\n\s+~(\S+) (\$\w+);", text).groups()  # type: ignore[union-attr]
    python = re.compile(pattern.replace("(?<", "(?P<"))
    for uri, passed in (("/pith/tile/0/000", "/tile/0/000"),
                        ("/pith/tile/0%2F000", "/tile/0%2F000"),
                        ("/pith/proof/inclusion/x?copy=c", "/proof/inclusion/x?copy=c"),
                        ("/other/checkpoint", None)):  # fmt: skip
        found = python.match(uri)
        assert (found.group(value.removeprefix("$")) if found else None) == passed, uri
    passes = {d[1] for ds in nginx_blocks().values() for d in ds if d[0] == "proxy_pass"}
    assert passes == {"http://127.0.0.1:8080$pith_uri"}


def test_the_compressed_routes_are_the_ones_the_doc_names() -> None:
    """The compression paragraph said "JSON and JSON Lines answers of 1 KiB or more": the
    JSON of ``/stats`` (1,387 bytes on a store of one pith) went uncompressed, as do errors.
    The routes under the compressing middleware are the four it names, each marked in the
    table."""
    from starlette_compress import CompressMiddleware

    squeezed = {r.path.split("{")[0] for r in app.routes(None)  # type: ignore[arg-type]
                if isinstance(getattr(r.app, "app", None), CompressMiddleware)}  # fmt: skip
    assert squeezed == {"/copies/", "/copy/", "/event/", "/state/"}
    prose = " ".join(DOC.split())
    named = prose.split("**Compression.** The answers of ")[1].split(" (the table's")[0]
    assert set(re.findall(r"`(/[a-z]+/)`", named)) == squeezed
    table = DOC.split("\n## Endpoints\n")[1].split("\n\n**Tiles")[0].splitlines()
    for path in squeezed:
        rows = [line for line in table if line.startswith(f"| `{path}")]
        assert len(rows) == 1 and rows[0].endswith("zstd, brotli or gzip |"), path
