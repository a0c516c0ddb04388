"""Drives the real agno package (2.9.0 or 3.1.10, whichever venv runs it) against a Firestore
project the Rust tests also use (the emulator named by FIRESTORE_EMULATOR_HOST): agno's
`FirestoreDb(project_id=PROJECT)`.

    python agno_firestore_driver.py COMMAND firestore:PROJECT

Commands (the workloads are agno_driver.py's, shared with the SQL interop tests):
    write-v2     (agno 2.9.0) write a pre-v3 workload: sessions with runs inside, memories, an eval, knowledge
    write-v3     (agno 3.1.10) write sessions, runs (one document each), memories
    migrate-v3   (agno 3.1.10) MigrationManager(db).up()
    dump-v3      (agno 3.1.10) print everything agno reads back, as JSON on stdout
    raw          (either) print every document of the project as {collection: [{"_id": id, ...}]}, as JSON
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import agno_driver  # noqa: E402


def project(target):
    kind, _, name = target.partition(":")
    if kind != "firestore" or not name:
        raise SystemExit(f"unknown target {target!r} (expected firestore:PROJECT)")
    if not os.environ.get("FIRESTORE_EMULATOR_HOST"):
        raise SystemExit("FIRESTORE_EMULATOR_HOST is not set")
    return name


def open_db(target):
    from agno.db.firestore import FirestoreDb

    return FirestoreDb(project_id=project(target))


def raw(target):
    from google.cloud import firestore

    client = firestore.Client(project=project(target))
    out = {}
    for coll in sorted(c.id for c in client.collections()):
        docs = [dict(d.to_dict(), _id=d.id) for d in client.collection(coll).stream()]
        out[coll] = sorted(docs, key=lambda d: json.dumps(d, sort_keys=True, default=str))
    print(json.dumps(out, sort_keys=True, default=str))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "raw":
        raw(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] in agno_driver.COMMANDS:
        agno_driver.COMMANDS[sys.argv[1]](open_db(sys.argv[2]))
    else:
        raise SystemExit(__doc__)
