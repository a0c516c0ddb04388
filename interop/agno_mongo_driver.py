"""Drives the real agno package (2.9.0 or 3.1.10, whichever venv runs it) against a MongoDB
database the Rust tests also use: agno's `MongoDb(db_url=URL, db_name=NAME)`.

    python agno_mongo_driver.py COMMAND mongodb:URL#DBNAME

Commands (the workloads are agno_driver.py's, shared with the SQL interop tests):
    write-v2     (agno 2.9.0) write a pre-v3 workload: sessions with runs inside, memories, an eval, knowledge
    write-v3     (agno 3.1.10) write sessions, runs (one document each), memories
    migrate-v3   (agno 3.1.10) MigrationManager(db).up()
    dump-v3      (agno 3.1.10) print everything agno reads back, as JSON on stdout
    raw          (either) print every document of the database (without `_id`), as JSON on stdout
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import agno_driver  # noqa: E402


def split(target):
    kind, _, rest = target.partition(":")
    url, _, name = rest.partition("#")
    if kind != "mongodb" or not url or not name:
        raise SystemExit(f"unknown target {target!r} (expected mongodb:URL#DBNAME)")
    return url, name


def open_db(target):
    from agno.db.mongo import MongoDb

    url, name = split(target)
    return MongoDb(db_url=url, db_name=name)


def raw(target):
    import pymongo

    url, name = split(target)
    db = pymongo.MongoClient(url)[name]
    out = {}
    for coll in sorted(db.list_collection_names()):
        docs = [{k: v for k, v in d.items() if k != "_id"} for d in db[coll].find()]
        out[coll] = sorted(docs, key=lambda d: json.dumps(d, sort_keys=True, default=str))
    print(json.dumps(out, sort_keys=True, default=str))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "raw":
        raw(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] in agno_driver.COMMANDS:
        agno_driver.COMMANDS[sys.argv[1]](open_db(sys.argv[2]))
    else:
        raise SystemExit(__doc__)
