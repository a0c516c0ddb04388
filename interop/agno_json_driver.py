"""Drives the real agno package (2.9.0 or 3.1.10, whichever venv runs it) against a JSON
database directory the Rust tests also use: agno's `JsonDb(db_path=DIR)`.

    python agno_json_driver.py COMMAND json:DIR

Commands (the workloads are agno_driver.py's, shared with the SQL interop tests):
    write-v2     (agno 2.9.0) write a pre-v3 workload: sessions with runs inside, memories, an eval, knowledge
    write-v3     (agno 3.1.10) write sessions, runs (one row each), memories
    migrate-v3   (agno 3.1.10) MigrationManager(db).up()
    dump-v3      (agno 3.1.10) print everything agno reads back, as JSON on stdout
    memories-v3  (agno 3.1.10) print each memory's timestamps as agno's UserMemory decodes them
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import agno_driver  # noqa: E402


def open_db(target):
    kind, _, rest = target.partition(":")
    if kind == "json" and rest:
        from agno.db.json import JsonDb

        return JsonDb(db_path=rest)
    raise SystemExit(f"unknown target {target!r} (expected json:DIR)")


def memories_v3(db):
    from agno.db.schemas.memory import UserMemory

    rows, _ = db.get_user_memories(deserialize=False)
    out = []
    for row in sorted(rows, key=lambda m: m["memory_id"]):
        m = UserMemory.from_dict(row)
        out.append({"memory_id": m.memory_id, "created_at": m.created_at, "updated_at": m.updated_at})
    print(json.dumps(out, sort_keys=True))


COMMANDS = dict(agno_driver.COMMANDS)
COMMANDS["memories-v3"] = memories_v3

if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in COMMANDS:
        raise SystemExit(__doc__)
    COMMANDS[sys.argv[1]](open_db(sys.argv[2]))
