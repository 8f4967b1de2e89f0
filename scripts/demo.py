"""`make demo`: the main job of pithlog, end to end, on an embedded default.

Makes a fresh folder with an empty store, writes a keyring for the fixed public test
registry key, re-signs the published seed's own payloads (vectors/seeds/state-2411.00284.json)
with it, appends them to the store, prints the cached state document, checks it offline, and
replays the whole store with --verify; then exports the log, signs a checkpoint of it, proves
that the record is in it and verifies the proof, imports the export into a mirror and checks
the checkpoint against the mirror: each step through the real CLI (`pithlog.cli.main`),
with the command shown as a user would type it.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path

from pithlog.cli import main
from pithlog.testing import test_key, write_key_file

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "vectors" / "seeds" / "state-2411.00284.json"


def run(*argv: str, stdout_to: Path | None = None, append: bool = False) -> int:
    """Run ``pithlog ARGV`` and print it as a shell would run it: ``> FILE`` writes
    stdout to FILE afresh, ``>> FILE`` (``append``) adds to it, exactly as done here."""
    redirect = (" >> " if append else " > ") + shlex.quote(str(stdout_to)) if stdout_to else ""
    print(f"\n$ pithlog {shlex.join(argv)}{redirect}", flush=True)
    if stdout_to is None:
        status = main(list(argv))
    else:
        with stdout_to.open("ab" if append else "wb") as handle:
            status = main(list(argv), stdout=handle)
    sys.stdout.flush()
    if status != 0:
        print(f"demo: 'pithlog {argv[0]}' exited {status}", file=sys.stderr)
        sys.exit(status)
    return status


def demo(folder: Path) -> None:
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    key = test_key("registry")
    write_key_file(folder / "registry.key", key)
    print(f"demo: fresh folder {folder}, with the public test key {key.key_id} in "
          f"{folder / 'registry.key'}")  # fmt: skip
    run("keyring", "new", str(folder / "keyring.json"))
    run("keyring", "add", str(folder / "keyring.json"), str(folder / "registry.key"))

    seed = json.loads(SEED.read_bytes())
    current = seed["current"]
    record = current["record_created"]
    (folder / "record.json").write_text(json.dumps(record["payload"]))
    snapshot = current["graph_snapshots"][0]
    (folder / "snapshot.json").write_text(json.dumps(snapshot["payload"]))
    events = folder / "events.jsonl"

    run("sign", "--key", str(folder / "registry.key"), "--type", "record_created",
        "--payload", str(folder / "record.json"), "--created-at", record["created_at"],
        stdout_to=events)  # fmt: skip
    pith = json.loads(events.read_bytes().splitlines()[0])["pith_number"]
    run("sign", "--key", str(folder / "registry.key"), "--type", "graph_snapshot",
        "--pith", pith, "--payload", str(folder / "snapshot.json"),
        "--created-at", snapshot["created_at"], stdout_to=events, append=True)  # fmt: skip
    store = str(folder / "store")
    keyring_file = str(folder / "keyring.json")
    run("--store", store, "append", "--keyring", keyring_file, str(events))
    state = folder / "state.json"
    run("--store", store, "state", pith, stdout_to=state)
    print(state.read_text(encoding="utf-8"), end="")
    run("verify-state", str(state))
    reduced = folder / "reduced.jsonl"
    run("reduce", "--keyring", keyring_file, str(events), stdout_to=reduced)
    same = reduced.read_bytes() == state.read_bytes().rstrip(b"\n") + b"\n"
    print(f"demo: the store's state and `pithlog reduce` of the same events are "
          f"{'byte-identical' if same else 'DIFFERENT'}")  # fmt: skip
    if not same:
        sys.exit(1)
    run("--store", store, "replay", "--verify", "--keyring", keyring_file)
    run("verify-state", str(SEED))

    # the log a mirror copies, and the transparency that lets it check what it copied
    export = folder / "export.jsonl"
    run("--store", store, "export", stdout_to=export)
    checkpoint = folder / "today.cp"
    origin = "registry.test.invalid/pith"
    key_file = str(folder / "registry.key")
    run("--store", store, "checkpoint", "--key", key_file, "--origin", origin,
        stdout_to=checkpoint)  # fmt: skip
    print(checkpoint.read_text(encoding="utf-8"), end="")
    record_id = json.loads(events.read_bytes().splitlines()[0])["event_id"]
    proof = folder / "record.tlog-proof"
    run("--store", store, "prove", "inclusion", record_id, "--key", key_file,
        "--origin", origin, stdout_to=proof)  # fmt: skip
    run("verify-proof", "--keyring", keyring_file, str(proof))
    mirror = str(folder / "mirror")
    run("--store", mirror, "import", "--keyring", keyring_file, str(export))
    run("--store", mirror, "verify-checkpoint", "--keyring", keyring_file, "--check-store",
        str(checkpoint))  # fmt: skip
    print(f"\ndemo: done; files are in {folder}")
    # the pages for people: printed, not started (make demo leaves nothing running)
    print("demo: to read the store in a browser, serve it (needs pithlog[net], which make "
          "install includes):")  # fmt: skip
    print(f"  .venv/bin/pithlog --store {shlex.quote(store)} serve --listen 127.0.0.1:8080 "
          f"--key {shlex.quote(key_file)} --origin {origin}")  # fmt: skip
    print(f"  then open http://127.0.0.1:8080/pith/{pith}")


if __name__ == "__main__":
    demo(Path(sys.argv[1] if len(sys.argv) > 1 else ".demo"))
