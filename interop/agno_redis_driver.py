"""Drives the real agno package (2.9.0 or 3.1.10, whichever venv runs it) against a Redis or
Valkey server the Rust tests also use, through agno's own RedisDb, under one key prefix.

    python agno_redis_driver.py COMMAND redis:URL#PREFIX

Commands (the workloads and the dump are agno_driver.py's, so SQL and Redis are checked
the same way):
    write-v2    (agno 2.9.0) write a pre-v3 workload: sessions with runs inline, memories, an eval, knowledge
    write-v3    (agno 3.1.10) write sessions, runs (one key each), memories
    migrate-v3  (agno 3.1.10) MigrationManager(db).up()
    dump-v3     (agno 3.1.10) print everything agno reads back, as JSON on stdout
    jobs-*, session-*  (agno 3.1.10) agno_driver.py's job-queue commands
    delete-v3     (agno 3.1.10) delete write-v3's session py-s1 and memory py-m1 through agno
    check-bytes   (agno 3.1.10) re-encode every string value under the prefix as agno would
                  (records: serialize_data; job tickets: json.dumps) and print the keys whose
                  stored bytes differ, as a JSON list
"""

import json
import sys

from agno_driver import COMMANDS


def delete_v3(db):
    assert db.delete_session("py-s1", user_id="carol")
    db.delete_user_memory("py-m1", user_id="carol")


def check_bytes(db):
    from agno.db.redis.utils import serialize_data

    differ = []
    for key in db.redis_client.scan_iter(match=f"{db.db_prefix}:*", count=1000):
        if db.redis_client.type(key) != "string" or ":index:" in key or ":agno_schema_versions:" in key:
            continue
        raw = db.redis_client.get(key)
        try:
            value = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(value, dict):
            continue
        again = json.dumps(value) if ":jobs:job:" in key else serialize_data(value)
        if again != raw:
            differ.append(key)
    print(json.dumps(sorted(differ)))


COMMANDS = {**COMMANDS, "check-bytes": check_bytes, "delete-v3": delete_v3}


def open_db(target):
    kind, _, rest = target.partition(":")
    if kind != "redis":
        raise SystemExit(f"unknown target {target!r}: expected redis:URL#PREFIX")
    from agno.db.redis import RedisDb

    url, _, prefix = rest.partition("#")
    return RedisDb(db_url=url, db_prefix=prefix or "agno")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in COMMANDS:
        raise SystemExit(__doc__)
    COMMANDS[sys.argv[1]](open_db(sys.argv[2]))
