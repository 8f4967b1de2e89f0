"""The pages for people, in a real browser: Debian's Chromium driven by Playwright against a
real ``pithlog serve`` on 127.0.0.1. Screenshots are kept under ``tests/browser/output/``
for people to look at.

Skipped, with the reason printed, only where Chromium or Playwright is missing (``.ci/run``
installs both, so CI always runs it)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pithlog.cli import main
from pithlog.net.pages import REASON_MEANINGS
from pithlog.protocol.events import sign_event
from pithlog.protocol.keys import SigningKey, load_keyring
from pithlog.testing import test_key, write_key_file

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "vectors" / "cases"
OUTPUT = Path(__file__).resolve().parent / "output"
ORIGIN = "registry.test.invalid/pith"
VERSIONED = "2607.00001"
"""An arXiv id of two records (its versions 1 and 2): its search lists them."""
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "net"))
from served import prefix_proxy, serve_process, two_versions  # noqa: E402  (the network tests' helpers)

playwright_api = pytest.importorskip(
    "playwright.sync_api", reason="Playwright for Python is not installed (make install)"
)
if not os.path.exists(CHROMIUM):
    pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install chromium (.ci/run does)",
                allow_module_level=True)  # fmt: skip

FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
"""Chromium as root, on a machine whose only network is loopback."""


def _run(argv: list[str]) -> None:
    import io

    out, err = io.BytesIO(), io.StringIO()
    status = main(argv, stdout=out, stderr=err)
    assert status in (0, 2), err.getvalue()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A store of the conformance cases with equivocations, invalid events and the real
    seed, plus an event whose strings carry HTML and script, served by ``pithlog serve``."""
    tmp = tmp_path_factory.mktemp("pages")
    store = str(tmp / "store")
    key = tmp / "registry.key"
    write_key_file(key, test_key("registry"))
    keyring = str(CASES / "equivocations" / "keyring.json")
    for case in ("seed-2411.00284", "equivocations"):
        digest = load_keyring((CASES / case / "keyring.json").read_bytes()).digest
        assert digest == load_keyring(Path(keyring).read_bytes()).digest, "one keyring"
        _run(["--store", store, "append", "--keep-invalid", "--keyring", keyring,
              str(CASES / case / "events.jsonl")])  # fmt: skip
    seed_state = json.loads((CASES / "seed-2411.00284" / "expected.jsonl").read_text())
    pith = seed_state["pith_number"]
    hostile = sign_event(test_key("author"), "author_attestation", pith, "claim:<b>x</b>",
                         "2026-08-01T00:00:00Z",
                         {"statement": '<script>document.title="pwned"</script><img src=x '
                          'onerror="document.title=\'pwned\'">'})  # fmt: skip
    # a target of 20,000 characters without a break, and a payload nested 60 deep
    deep: list[Any] = []
    for _ in range(60):
        deep = [deep]
    unbroken = sign_event(test_key("author"), "author_attestation", pith, "claim:" + "A" * 20_000,
                          "2026-08-01T00:00:01Z", {"statement": "B" * 20_000, "deep": deep})
    # a right-to-left override (U+202E) left open, in a target and in an unknown key's
    # signer_id (an invalid event, kept)
    reversing = sign_event(test_key("author"), "author_attestation", pith, "claim:\u202eevil",
                           "2026-08-01T00:00:02Z", {"statement": "hi"})  # fmt: skip
    stranger = SigningKey.from_seed(bytes(32), "test-rlo", "\u202eevil", "author")
    reversing_signer = sign_event(stranger, "author_attestation", pith, "record",
                                  "2026-08-01T00:00:03Z", {"statement": "hi"})  # fmt: skip
    # two versions of one paper: a search of its arXiv id lists both records
    versions = two_versions(VERSIONED)
    path = tmp / "hostile.jsonl"
    signed = (hostile, unbroken, reversing, reversing_signer, *versions)
    path.write_text("".join(json.dumps(e) + "\n" for e in signed))
    _run(["--store", store, "append", "--keep-invalid", "--keyring", keyring, str(path)])
    with (serve_process(Path(store), "--key", str(key), "--origin", ORIGIN) as server,
          prefix_proxy(server.url, "/pith") as proxied):  # fmt: skip
        yield {"url": server.url, "proxied": proxied, "pith": pith, "hostile": hostile,
               "unbroken": unbroken,
               "reversing_signer": reversing_signer,
               "equivocated": json.loads((CASES / "equivocations" / "expected.jsonl")
                                         .read_text().splitlines()[0])}  # fmt: skip


@pytest.fixture(scope="module")
def browser(served: dict[str, Any]) -> Iterator[Any]:
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            yield b
        finally:
            b.close()


def shot(page: Any, name: str) -> None:
    OUTPUT.mkdir(exist_ok=True)
    page.screenshot(path=str(OUTPUT / f"{name}.png"), full_page=True)


def accessible(page: Any) -> None:
    """Every page: a title, one h1, a label for every form field, text for every link."""
    assert page.title()
    assert page.locator("h1").count() == 1
    for field in page.locator("input:not([type=hidden]), select, textarea").all():
        name = field.get_attribute("id")
        assert name and page.locator(f"label[for='{name}']").count() == 1
    for link in page.locator("a").all():
        assert link.inner_text().strip() or link.get_attribute("aria-label")


def styled(page: Any) -> bool:
    """The page's stylesheet applies: the body's font is style.css's, not the browser's."""
    return "system-ui" in page.evaluate("getComputedStyle(document.body).fontFamily")


def test_search_an_arxiv_id_and_read_the_record(served: dict[str, Any], browser: Any) -> None:
    page = browser.new_page()
    page.goto(served["url"] + "/")
    accessible(page)
    assert "copies logged" in page.inner_text("main")
    shot(page, "home")
    page.fill("input[type=search]", "2411.00284")
    page.click("button[type=submit]")
    page.wait_for_url(f"**/pith/{served['pith']}")
    accessible(page)
    heading = page.inner_text("h1")
    assert heading == "SimpleFSDP: Simpler Fully Sharded Data Parallel with torch.compile"
    body = page.inner_text("main")
    assert "cs.DC" in body and "2411.00284" in body and "Graph snapshots" in body
    shot(page, "pith-seed")
    # a DOI, and a pith short alias, land on the same record
    for query in ("10.48550/arXiv.2411.00284", served["pith"][10:18]):
        page.fill("input[type=search]", query)
        page.click("button[type=submit]")
        page.wait_for_url(f"**/pith/{served['pith']}")
        assert page.inner_text("h1") == heading
    # the event's JSON, by its link
    page.click("text=its JSON >> nth=0")
    doc = json.loads(page.inner_text("body"))
    assert doc["event_id"].startswith("sha256:") and doc["pith_number"] == served["pith"]
    page.close()


def test_behind_a_proxy_under_a_prefix_the_pages_keep_their_style_links_and_search(
    served: dict[str, Any], browser: Any
) -> None:
    """Served under ``/pith/`` by a reverse proxy (docs/network.md, "Running a registry"),
    the pages linked from the server's root: the stylesheet was the proxy's 404 (the page
    unstyled), and the search and every link left the prefix. Through such a proxy the
    stylesheet applies, the search lands on the record, and its links stay under the
    prefix."""
    proxied = served["proxied"]
    page = browser.new_page()
    styles: list[int] = []
    page.on("response", lambda r: styles.append(r.status) if r.url.endswith(".css") else None)
    page.goto(proxied + "/")
    assert styles == [200] and styled(page)
    page.fill("input[type=search]", "2411.00284")
    page.click("button[type=submit]")
    page.wait_for_url(f"{proxied}/pith/{served['pith']}")
    assert "Graph snapshots" in page.inner_text("main") and styled(page)
    hrefs = page.eval_on_selector_all("a[href]", "(links) => links.map((a) => a.href)")
    assert hrefs and all(h.startswith(proxied + "/") for h in hrefs), hrefs
    page.click("text=its JSON >> nth=0")
    doc = json.loads(page.inner_text("body"))
    assert doc["pith_number"] == served["pith"]
    page.close()


def test_an_equivocation_and_invalid_events_read_as_such(
    served: dict[str, Any], browser: Any
) -> None:
    state = served["equivocated"]
    page = browser.new_page()
    page.goto(served["url"] + "/search?q=" + state["pith_number"])
    page.wait_for_url(f"**/pith/{state['pith_number']}")
    accessible(page)
    counts = page.inner_text("h1 + p")
    assert f"{state['equivocation_count']} equivocation" in counts
    section = page.locator("section[aria-labelledby=equivocations]")
    # one event applied in each slot, the state's, the others marked not applied ("applied"
    # alone would match both badges)
    applied = section.locator(".badge", has_text=re.compile("^applied$"))
    assert applied.count() == state["equivocation_count"]
    others = sum(len(q["event_ids"]) - 1 for q in state["equivocations"])
    assert section.locator(".badge", has_text="not applied").count() == others
    marked = [card.locator(".hash").first.get_attribute("title")
              for card in section.locator(".card.applied").all()]  # fmt: skip
    assert marked == [q["applied_event_id"] for q in state["equivocations"]]
    # each invalid event: a link to it, its reason code and what the code means
    rows = page.locator("section[aria-labelledby=invalid] tbody tr")
    assert rows.count() == len(state["invalid_events"]) > 0
    for row, invalid in zip(rows.all(), state["invalid_events"], strict=True):
        assert row.locator("a").get_attribute("href") == "../event/" + invalid["event_id"]
        assert row.locator("code").inner_text() == invalid["reason"]
        assert row.locator("td").nth(2).inner_text() == REASON_MEANINGS[invalid["reason"]]
    shot(page, "pith-equivocations")
    page.goto(served["url"] + "/search?q=" + served["pith"][5:9])  # not an alias: nothing
    assert page.locator("h1").inner_text() in {"Nothing found", "Search"}
    page.close()


def test_strings_from_events_are_never_interpreted(served: dict[str, Any], browser: Any) -> None:
    page = browser.new_page()
    ran: list[str] = []
    page.on("dialog", lambda d: (ran.append(d.message), d.dismiss()))
    page.goto(served["url"] + "/event/" + served["hostile"]["event_id"])
    accessible(page)
    assert page.title() != "pwned" and not ran
    text = page.inner_text("main")
    assert '<script>document.title="pwned"</script>' in text  # shown, as text
    assert page.locator("main script").count() == 0 and page.locator("main img").count() == 0
    page.goto(served["url"] + f"/pith/{served['pith']}")
    assert "claim:<b>x</b>" in page.inner_text("main") and page.title() != "pwned"
    shot(page, "pith-hostile-strings")
    page.close()


def test_a_long_or_deep_string_from_an_event_keeps_the_page_s_width(
    served: dict[str, Any], browser: Any
) -> None:
    """A signed target of 20,000 characters without a break made the record's page 247,000
    pixels wide, and a payload nested 60 deep its event's page wider than the screen: long
    strings wrap, and a deep payload scrolls in its own box."""
    width = 1000
    page = browser.new_page(viewport={"width": width, "height": 800})
    for path in (f"/pith/{served['pith']}", "/event/" + served["unbroken"]["event_id"], "/"):
        page.goto(served["url"] + path)
        assert page.evaluate("document.documentElement.scrollWidth") <= width, path
    page.close()


LEFT_TO_RIGHT = """(element) => {
    const text = [...element.childNodes].filter((n) => n.nodeType === 3)
        .sort((a, b) => b.data.trim().length - a.data.trim().length)[0];
    const at = (i) => { const r = document.createRange(); r.setStart(text, i);
                        r.setEnd(text, i + 1); return r.getBoundingClientRect().left; };
    const s = text.data.trimEnd();
    return at(s.length - s.trimStart().length) < at(s.length - 1);
}"""
"""The first letter of an element's longest text is left of its last: read left to right."""


def test_a_right_to_left_override_in_a_string_reverses_nothing_after_it(
    served: dict[str, Any], browser: Any
) -> None:
    """A right-to-left override (U+202E) left open in a signed target reversed the time
    after it in its card's heading, and one in an unknown key's signer_id the signer's type
    and key id after it; a search's query reversed the end of the sentence that reflects
    it. Each such string is isolated (``<bdi>``, or FSI and PDI in a sentence)."""
    page = browser.new_page()
    page.goto(served["url"] + f"/pith/{served['pith']}")
    heading = page.locator("h3", has_text="evil")
    assert heading.count() == 1
    assert heading.locator("time").evaluate(LEFT_TO_RIGHT)
    page.goto(served["url"] + "/event/" + served["reversing_signer"]["event_id"])
    signer = page.locator("dd", has_text="evil").locator(".muted")
    assert "key test-rlo" in signer.inner_text() and signer.evaluate(LEFT_TO_RIGHT)
    # a search reflected in the sentence "No record ... has the alias <q>.": its full stop
    # stays right of the query's last letter
    page.goto(served["url"] + "/search?q=doi:10.1/%E2%80%AEevil")
    assert page.locator("main p").evaluate("""(p) => {
        const text = p.firstChild, s = text.data, end = s.lastIndexOf(".");
        const at = (i) => { const r = document.createRange(); r.setStart(text, i);
                            r.setEnd(text, i + 1); return r.getBoundingClientRect().left; };
        return s.endsWith(".") && at(s.lastIndexOf("l")) < at(end);
    }""")
    page.close()


PHONES = (320, 360)
"""Phone widths, in CSS pixels: the narrowest in use, and the most common."""


def test_every_page_is_one_column_on_a_phone(served: dict[str, Any], browser: Any) -> None:
    """At 360 px the header's search form (its label, a field as wide as its placeholder and
    the button, none of them allowed to shrink) was 24 px wider than the screen on every
    page, so every page scrolled sideways. No page is wider than a phone's screen: the front
    page, records (the hostile strings, the equivocations), events, a search that lists
    records, and the 404 pages."""
    paths = {  # a path, what it shows, the name of its screenshot
        "/": ("copies logged", "home"),
        f"/pith/{served['pith']}": ("Graph snapshots", "pith-seed"),
        f"/pith/{served['equivocated']['pith_number']}": ("equivocation", "pith-equivocations"),
        "/event/" + served["hostile"]["event_id"]: ("<script>", "event-hostile"),
        "/event/" + served["unbroken"]["event_id"]: ("claim:AAAA", "event-unbroken"),
        "/search?q=" + VERSIONED: ("names 2 records", "search-several"),
        "/search?q=doi:10.1/none": ("Nothing found", "search-none"),
        "/pith/pith:2024:AAAAAAAAAAAAAAAAAAAAAAAAAA": ("Unknown", "pith-unknown"),
        "/event/sha256:" + "0" * 64: ("Unknown event", "event-unknown"),
    }
    wide = []
    for width in PHONES:
        page = browser.new_page(viewport={"width": width, "height": 740})
        for path, (shown, name) in paths.items():
            answer = page.goto(served["url"] + path)
            assert answer is not None
            assert shown in page.inner_text("body"), path
            accessible(page)
            if name.endswith("-unknown"):
                assert answer.status == 404 and page.locator("h1").count() == 1
            shot(page, f"phone-{width}-{name}")
            scrolled = page.evaluate("document.documentElement.scrollWidth")
            if scrolled > width:
                wide.append(f"{path} at {width} px: {scrolled} px wide")
            # an equivocation's copies side by side: each card as wide as its column (a
            # column of at least 16rem was wider than a 320 px screen's section)
            cards = page.evaluate("[...document.querySelectorAll('.side-by-side > .card')]"
                                  ".map(c => [c.offsetWidth, c.parentElement.clientWidth])")
            wide += [f"{path} at {width} px: a card {card} px in {room} px"
                     for card, room in cards if card > room]
        page.close()
    assert not wide, wide
