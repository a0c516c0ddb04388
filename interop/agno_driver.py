"""Drives the real agno package (2.9.0 or 3.1.10, whichever venv runs it) against a database
the Rust tests also use, so both sides write and read the same tables.

    python agno_driver.py COMMAND TARGET

TARGET is `sqlite:PATH`, `postgres:URL#SCHEMA` or `mysql:URL#DATABASE`. Commands:
    write-v2    (agno 2.9.0) write a pre-v3 workload: sessions with runs blobs, memories, an eval, knowledge
    write-v3    (agno 3.1.10) write sessions, runs (one row each), memories
    create-v3   (agno 3.1.10) create every table the adapter has
    migrate-v3  (agno 3.1.10) MigrationManager(db).up()
    dump-v3     (agno 3.1.10) print everything agno reads back, as JSON on stdout
    write-surrogates  (agno 3.1.10) a session whose middle run holds a lone surrogate
    read-surrogates   (agno 3.1.10) print that session's name and run contents, as JSON
    jobs-enqueue  (agno 3.1.10) enqueue job py-j1 for carol with idempotency key k1; print the outcome
    jobs-work     (agno 3.1.10) claim one job as worker py-worker and complete it; print the claimed job
    jobs-claim    (agno 3.1.10) claim one job as worker py-worker; print it (null when none)
    jobs-dump     (agno 3.1.10) print every job agno lists, by id
    session-enqueue  (agno 3.1.10) enqueue serialized ticket py-t1 of session mix-s; print the outcome
    session-finish   (agno 3.1.10) complete py-t1 as py-worker; print the job
"""

import asyncio
import json
import logging
import sys


def send_agno_logs_to_stderr():
    """agno logs INFO lines to stdout (2.9.0 through rich's console, 3.1.10 through a
    StreamHandler when stdout is not a terminal; agno/utils/log.py), e.g. when it creates a
    table; stdout carries this driver's JSON, so move them to stderr."""
    import agno.utils.log  # noqa: F401  (builds agno's loggers)

    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if name.startswith("agno") and isinstance(logger, logging.Logger):
            for handler in logger.handlers:
                if getattr(handler, "console", None) is not None:
                    handler.console.file = sys.stderr
                elif isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
                    handler.setStream(sys.stderr)


send_agno_logs_to_stderr()


def open_db(target):
    kind, _, rest = target.partition(":")
    if kind == "sqlite":
        from agno.db.sqlite import SqliteDb

        return SqliteDb(db_file=rest)
    if kind == "postgres":
        from agno.db.postgres import PostgresDb

        url, _, schema = rest.partition("#")
        url = url.replace("postgres://", "postgresql+psycopg://", 1)
        return PostgresDb(db_url=url, db_schema=schema or "ai")
    if kind == "mysql":
        from agno.db.mysql import MySQLDb

        url, _, schema = rest.partition("#")
        url = url.replace("mysql://", "mysql+pymysql://", 1)
        return MySQLDb(db_url=url, db_schema=schema or "ai")
    raise SystemExit(f"unknown target {target!r}")


def write_v2(db):
    from agno.db.schemas.evals import EvalRunRecord, EvalType
    from agno.db.schemas.knowledge import KnowledgeRow
    from agno.db.schemas.memory import UserMemory
    from agno.run.agent import RunOutput
    from agno.run.base import RunStatus
    from agno.run.team import TeamRunOutput
    from agno.session.agent import AgentSession
    from agno.session.team import TeamSession

    agent_runs = [
        RunOutput(run_id=f"v2-a{i}", agent_id="agent-1", session_id="v2-s-agent", user_id="alice",
                  content=f"answer {i} ü", status=RunStatus.completed, created_at=1700000000 + i)
        for i in range(3)
    ]
    db.upsert_session(AgentSession(session_id="v2-s-agent", agent_id="agent-1", user_id="alice",
                                   session_data={"session_name": "Trip ü"}, metadata={"k": [1, 2]},
                                   runs=agent_runs, created_at=1700000000))
    team_runs = [
        TeamRunOutput(run_id="v2-t0", team_id="team-1", session_id="v2-s-team", user_id="bob",
                      content="team answer", status=RunStatus.completed, created_at=1700000100),
        RunOutput(run_id="v2-t0-m1", agent_id="member-1", session_id="v2-s-team", user_id="bob",
                  parent_run_id="v2-t0", content="member answer", status=RunStatus.completed, created_at=1700000101),
    ]
    db.upsert_session(TeamSession(session_id="v2-s-team", team_id="team-1", user_id="bob",
                                  session_data={"session_name": "Research"}, runs=team_runs, created_at=1700000100))
    db.upsert_user_memory(UserMemory(memory_id="v2-m1", memory="likes green tea", user_id="alice",
                                     topics=["drinks", "tea"], created_at=1700000200))
    db.create_eval_run(EvalRunRecord(run_id="v2-e1", eval_type=EvalType.ACCURACY, eval_data={"avg_score": 9},
                                     eval_input={"input": "2+2"}, name="math", agent_id="agent-1"))
    db.upsert_knowledge_content(KnowledgeRow(id="v2-k1", name="doc.pdf", description="a doc", metadata={"pages": 3}))


def write_v3(db):
    from agno.db.schemas.memory import UserMemory
    from agno.run.agent import RunOutput
    from agno.run.base import RunStatus
    from agno.session.agent import AgentSession

    runs = [
        RunOutput(run_id=f"py-r{i}", agent_id="agent-py", session_id="py-s1", user_id="carol",
                  content=f"python answer {i}", status=RunStatus.completed, created_at=1710000000 + i)
        for i in range(2)
    ]
    session = AgentSession(session_id="py-s1", agent_id="agent-py", user_id="carol",
                           session_data={"session_name": "From Python"}, created_at=1710000000)
    db.upsert_session(session)
    for i, run in enumerate(runs):
        db.upsert_run(run, session_id="py-s1", user_id="carol", run_index=i)
    db.upsert_user_memory(UserMemory(memory_id="py-m1", memory="written by python", user_id="carol",
                                     topics=["interop"], created_at=1710000100))


def write_surrogates(db):
    """A session of three runs; the middle one carries a lone surrogate, as a file name
    decoded with `surrogateescape` does (agno stores it as the `\\udce9` escape)."""
    from agno.run.agent import RunOutput
    from agno.run.base import RunStatus
    from agno.session.agent import AgentSession

    db.upsert_session(AgentSession(session_id="sur-s1", agent_id="agent-py", user_id="dave",
                                   session_data={"session_name": "Surrogates"}, created_at=1720000000))
    names = ["plain.txt", b"caf\xe9.txt".decode("utf-8", "surrogateescape"), "also plain.txt"]
    for i, name in enumerate(names):
        run = RunOutput(run_id=f"sur-r{i}", agent_id="agent-py", session_id="sur-s1", user_id="dave",
                        content=name, status=RunStatus.completed, created_at=1720000000 + i)
        db.upsert_run(run, session_id="sur-s1", user_id="dave", run_index=i)


def read_surrogates(db):
    """The contents of session sur-s1's runs, as agno reads them, with Python's escapes."""
    from agno.db.base import SessionType

    session = db.get_session(session_id="sur-s1", session_type=SessionType.AGENT, user_id="dave")
    print(json.dumps({"session_name": (session.session_data or {}).get("session_name"),
                      "contents": [run.content for run in session.runs or []]}))


def create_v3(db):
    db._create_all_tables()


def migrate_v3(db):
    from agno.db.migrations.manager import MigrationManager

    asyncio.run(MigrationManager(db).up())


TABLES = ["agno_memories", "agno_sessions", "agno_metrics", "agno_eval_runs", "agno_knowledge",
          "agno_schedules", "agno_schedule_runs", "agno_learnings"]


def dump_v3(db):
    out = {"versions": {t: db.get_latest_schema_version(t) for t in TABLES}}
    rows, _ = db.get_sessions(deserialize=False)
    sessions = []
    for row in sorted(rows, key=lambda r: r["session_id"]):
        full = db.get_session(row["session_id"], session_type=None, deserialize=False)
        runs = full.get("runs") or []
        sessions.append({
            "session_id": full["session_id"], "session_type": full["session_type"], "user_id": full.get("user_id"),
            "session_data": full.get("session_data"), "metadata": full.get("metadata"),
            "created_at": full.get("created_at"),
            "runs": [{"run_id": r.get("run_id"), "status": r.get("status"), "content": r.get("content"),
                      "parent_run_id": r.get("parent_run_id")} for r in runs],
        })
    out["sessions"] = sessions
    table_runs = []
    for s in sessions:
        rows, _ = db.get_runs(session_id=s["session_id"], deserialize=False)
        table_runs += [{k: r.get(k) for k in ("run_id", "session_id", "run_type", "run_index", "user_id", "status",
                                              "parent_run_id")} for r in rows]
    out["runs"] = table_runs
    mems, _ = db.get_user_memories(deserialize=False)
    out["memories"] = sorted(({k: m.get(k) for k in ("memory_id", "memory", "topics", "user_id", "created_at")}
                              for m in mems), key=lambda m: m["memory_id"])
    evals, _ = db.get_eval_runs(deserialize=False)
    out["evals"] = sorted(({k: e.get(k) for k in ("run_id", "eval_type", "eval_data", "eval_input", "name", "user_id")}
                           for e in evals), key=lambda e: e["run_id"])
    contents, _ = db.get_knowledge_contents()
    out["knowledge"] = sorted(({"id": c.id, "name": c.name, "description": c.description, "metadata": c.metadata,
                                "user_id": c.user_id} for c in contents), key=lambda c: c["id"])
    print(json.dumps(out, sort_keys=True))


def declare_mysql_tables(db):
    """agno reflects the tables it did not create in this process, and MariaDB reports JSON
    columns as LONGTEXT (MySQL 8 reports JSON), so on MariaDB agno would bind dicts to text
    columns and read JSON back as strings. Declare the existing tables from agno's own
    schema instead, exactly as agno does for a table it creates, so it behaves as on MySQL 8.
    """
    tables = [(db.session_table_name, "sessions"), (db.runs_table_name, "runs"), (db.memory_table_name, "memories"),
              (db.metrics_table_name, "metrics"), (db.eval_table_name, "evals"), (db.knowledge_table_name, "knowledge"),
              (db.versions_table_name, "versions")]
    for name, table_type in tables:
        if db.table_exists(name):
            db._store_resolved_table(table_type, name, db._create_table(name, table_type))


def jobs_enqueue(db):
    from agno.db.schemas.jobs import QueuedJob

    job = QueuedJob(id="py-j1", component_type="agent", component_id="agent-py", session_id="py-s1",
                    user_id="carol", payload={"input": "from python \u00fc"}, idempotency_key="k1")
    print(json.dumps(db.enqueue_job(job.to_dict())))


def jobs_work(db):
    job = db.claim_job("py-worker", 60)
    if job is not None:
        assert db.complete_job(job["id"], "py-worker", job["attempt"], "completed")
    print(json.dumps(job))


def jobs_claim(db):
    print(json.dumps(db.claim_job("py-worker", 60)))


def jobs_dump(db):
    jobs, _ = db.list_jobs(limit=1000)
    print(json.dumps(sorted(jobs, key=lambda j: j["id"])))


def session_enqueue(db):
    from agno.db.schemas.jobs import QueuedJob

    job = QueuedJob(id="py-t1", component_type="agent", component_id="agent-py", session_id="mix-s",
                    payload={"input": "first", "serialize_session": True})
    print(json.dumps(db.enqueue_job(job.to_dict())))


def session_finish(db):
    job = db.get_job("py-t1")
    assert db.complete_job("py-t1", "py-worker", job["attempt"], "completed")
    print(json.dumps(db.get_job("py-t1")))


COMMANDS = {"jobs-enqueue": jobs_enqueue, "jobs-work": jobs_work, "jobs-claim": jobs_claim, "jobs-dump": jobs_dump,
            "session-enqueue": session_enqueue, "session-finish": session_finish,
            "write-v2": write_v2, "write-v3": write_v3, "write-surrogates": write_surrogates,
            "read-surrogates": read_surrogates, "create-v3": create_v3, "migrate-v3": migrate_v3, "dump-v3": dump_v3}

if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in COMMANDS:
        raise SystemExit(__doc__)
    db = open_db(sys.argv[2])
    if sys.argv[2].startswith("mysql:") and sys.argv[1] in ("write-v3", "dump-v3"):
        declare_mysql_tables(db)
    COMMANDS[sys.argv[1]](db)
