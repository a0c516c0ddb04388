"""Drives the real agno package (2.9.0 or 3.1.10, whichever venv runs it) against DynamoDB
tables the Rust tests also use: agno's `DynamoDb(db_client=boto3.client(...))` with every
table name prefixed, so each test has its own tables.

    python agno_dynamo_driver.py COMMAND dynamodb:URL#PREFIX

Commands are agno_driver.py's (write-v2, write-v3, migrate-v3, dump-v3), plus
    raw          (either) print every item of the prefixed tables, as JSON on stdout
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import agno_driver  # noqa: E402

TABLES = {
    "session_table": "agno_sessions",
    "runs_table": "agno_runs",
    "memory_table": "agno_memories",
    "metrics_table": "agno_metrics",
    "eval_table": "agno_eval_runs",
    "knowledge_table": "agno_knowledge",
}


def split(target):
    kind, _, rest = target.partition(":")
    url, _, prefix = rest.partition("#")
    if kind != "dynamodb" or not url or not prefix:
        raise SystemExit(f"unknown target {target!r} (expected dynamodb:URL#PREFIX)")
    return url, prefix


def client(url):
    import boto3

    return boto3.client("dynamodb", endpoint_url=url, region_name="us-east-1",
                        aws_access_key_id="test", aws_secret_access_key="test")


def open_db(target):
    import inspect

    from agno.db.dynamo import DynamoDb

    url, prefix = split(target)
    accepted = inspect.signature(DynamoDb.__init__).parameters
    names = {arg: prefix + table for arg, table in TABLES.items() if arg in accepted}
    db = DynamoDb(db_client=client(url), region_name="us-east-1", **names)
    # agno 3.1.10's DynamoDb.get_user_memories raises UnboundLocalError without limit/page
    # (its pagination branch is the only one that binds the result); pass them explicitly.
    unpaged = db.get_user_memories

    def get_user_memories(*args, **kwargs):
        kwargs.setdefault("limit", 10000)
        kwargs.setdefault("page", 1)
        return unpaged(*args, **kwargs)

    db.get_user_memories = get_user_memories
    return db


def raw(target):
    url, prefix = split(target)
    ddb = client(url)
    out = {}
    tables = [t for page in ddb.get_paginator("list_tables").paginate() for t in page["TableNames"]]
    for table in tables:
        if not table.startswith(prefix):
            continue
        items, start = [], None
        while True:
            kwargs = {"TableName": table, "ConsistentRead": True}
            if start:
                kwargs["ExclusiveStartKey"] = start
            page = ddb.scan(**kwargs)
            items += page.get("Items", [])
            start = page.get("LastEvaluatedKey")
            if not start:
                break
        out[table[len(prefix):]] = sorted(items, key=lambda i: json.dumps(i, sort_keys=True))
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "raw":
        raw(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] in agno_driver.COMMANDS:
        agno_driver.COMMANDS[sys.argv[1]](open_db(sys.argv[2]))
    else:
        raise SystemExit(__doc__)
