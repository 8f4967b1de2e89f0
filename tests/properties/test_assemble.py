"""The fast renderer (assemble from fragments) equals the reference one (state_document +
render) byte for byte on every generated reduction, and the fragments equal the JCS of the
parts they are sliced for."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings

from pithlog.protocol.canonical import jcs
from pithlog.protocol.reduce import Reduction, reduce_events
from pithlog.protocol.state import fragment, render, render_reduction, state_document

from .universe import KEYRING, envelopes, event_sets


@settings(max_examples=120, deadline=None)
@given(specs=event_sets())
def test_assembled_state_equals_reference_rendering(specs: list[tuple[Any, ...]]) -> None:
    for result in reduce_events(envelopes(specs), KEYRING).values():
        if isinstance(result, Reduction):
            assert render_reduction(result) == render(state_document(result))
            for envelope in result.applied:
                part = fragment(envelope)
                assert part.payload == jcs(envelope.value["payload"])
                assert part.signer == jcs(envelope.value["signer"])
                assert part.target == jcs(envelope.value["target"])
