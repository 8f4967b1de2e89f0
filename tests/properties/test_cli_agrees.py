"""The commands agree with the library on generated universes under generated keyrings:
``reduce`` prints one rendered state per pith with a state, sorted by pith_number;
``verify-state`` accepts each; ``append --keep-invalid`` in batches then ``replay
--verify`` reports nothing, and ``state`` prints what ``reduce`` printed."""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pithlog.cli import main
from pithlog.protocol.reduce import Reduction, reduce_events
from pithlog.protocol.state import render_reduction

from .keyrings import both, keyring_entries
from .universe import any_sets, envelopes


def run(argv: list[str]) -> tuple[int, bytes, str]:
    out, err = io.BytesIO(), io.StringIO()
    status = main(argv, stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


@settings(max_examples=15, deadline=None)
@given(specs=any_sets(), entries=keyring_entries(), data=st.data())
def test_reduce_append_replay_and_verify_state_agree(
    specs: list[tuple[Any, ...]], entries: list[dict[str, Any]], data: st.DataObject
) -> None:
    keyring, _ = both(entries)
    items = envelopes(specs)
    items += data.draw(st.lists(st.sampled_from(items), max_size=4), label="duplicates")
    items = data.draw(st.permutations(items), label="order")
    expected = {p: render_reduction(r) for p, r in reduce_events(items, keyring).items()
                if isinstance(r, Reduction)}  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        ring = tmp / "keyring.json"
        ring.write_text(json.dumps({"keyring_version": "1", "keys": entries}))
        log = tmp / "events.jsonl"
        log.write_bytes(b"".join(e.encoded + b"\n" for e in items))
        status, out, err = run(["reduce", "--keyring", str(ring), str(log)])
        assert status == 0, err
        assert out == b"".join(expected[p] + b"\n" for p in sorted(expected))
        for rendered in expected.values():
            (tmp / "state.json").write_bytes(rendered)
            assert run(["verify-state", str(tmp / "state.json")])[0] == 0
        store = str(tmp / "store")
        half = data.draw(st.integers(0, len(items)), label="cut")
        for part, lines in enumerate((items[:half], items[half:])):
            (tmp / f"part{part}.jsonl").write_bytes(b"".join(e.encoded + b"\n" for e in lines))
            status, _, err = run(["--store", store, "append", "--keyring", str(ring),
                                  "--keep-invalid", str(tmp / f"part{part}.jsonl")])  # fmt: skip
            assert status == 0, err
        status, out, err = run(["--store", store, "replay", "--keyring", str(ring), "--verify",
                                "--jobs", "1"])  # fmt: skip
        assert (status, out) == (0, b""), err
        for pith, rendered in expected.items():
            assert run(["--store", store, "state", pith])[1] == rendered + b"\n"
