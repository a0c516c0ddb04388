"""agno 3.1.10's side of the append-runs benchmark: N runs of ~2 KB appended one at a time
to one session with `upsert_run`, then the session read back. Prints one JSON object.

    python bench_agno.py sqlite:PATH N
    python bench_agno.py postgres:URL#SCHEMA N
    python bench_agno.py redis:URL#PREFIX N     (RedisDb; also against Valkey: ValkeyDb needs glide)
    python bench_agno.py mongo:URL#DATABASE N   (MongoDb)
    python bench_agno.py json:DIR N             (JsonDb)
    python bench_agno.py memory: N              (InMemoryDb)

The redis and mongo targets delete their key prefix / drop their database afterwards.
"""

import json
import os
import sys
import time

from agno_driver import open_db


def open_target(target):
    """agno's db for `target`, and a function that removes what the bench wrote (or None)."""
    kind, _, rest = target.partition(":")
    if kind == "redis":
        from agno.db.redis import RedisDb

        url, _, prefix = rest.partition("#")
        db = RedisDb(db_url=url, db_prefix=prefix or "agno")

        def cleanup():
            keys = list(db.redis_client.scan_iter(match=f"{db.db_prefix}:*", count=1000))
            for i in range(0, len(keys), 1000):
                db.redis_client.delete(*keys[i:i + 1000])

        return db, cleanup
    if kind == "mongo":
        from agno.db.mongo import MongoDb

        url, _, name = rest.partition("#")
        db = MongoDb(db_url=url, db_name=name or "agno")
        return db, lambda: db.db_client.drop_database(db.db_name)
    if kind == "json":
        from agno.db.json import JsonDb

        return JsonDb(db_path=rest), None
    if kind == "memory":
        from agno.db.in_memory import InMemoryDb

        return InMemoryDb(), None
    return open_db(target), None


def main():
    target, n = sys.argv[1], int(sys.argv[2])
    from agno.run.agent import RunOutput
    from agno.run.base import RunStatus
    from agno.session.agent import AgentSession

    db, cleanup = open_target(target)
    db.upsert_session(AgentSession(session_id="bench", agent_id="bench-agent", user_id="bench-user", created_at=int(time.time())))
    payload = "x" * 2000
    # BENCH_RUN=realistic: agno's own to_dict() of a realistic run, as the Rust side writes it.
    realistic = None
    if os.environ.get("BENCH_RUN") == "realistic":
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "realistic_run.json")) as f:
            realistic = json.load(f)
        realistic.update(session_id="bench", user_id="bench-user", agent_id="bench-agent")
        realistic = json.dumps(realistic)
    laps = []
    wall0, cpu0 = time.perf_counter(), os.times().user
    for i in range(n):
        if realistic is not None:
            # Built before the lap starts (from_dict consumes the dict it is given).
            run = RunOutput.from_dict({**json.loads(realistic), "run_id": f"run-{i}", "created_at": 1_700_000_000 + i})
        t = time.perf_counter()
        if realistic is None:
            run = RunOutput(run_id=f"run-{i}", agent_id="bench-agent", session_id="bench", user_id="bench-user",
                            content=payload, status=RunStatus.completed)
        db.upsert_run(run, session_id="bench", user_id="bench-user", run_index=i)
        laps.append(time.perf_counter() - t)
    wall, cpu = time.perf_counter() - wall0, os.times().user - cpu0
    if realistic is not None:
        wall = sum(laps)  # without building the runs
    # The median of 5 reads, as the Rust benches take it; BENCH_READS=0 skips them (to count
    # the appends' instructions alone, under callgrind).
    reads, session = [], None
    for _ in range(int(os.environ.get("BENCH_READS", "5"))):
        t = time.perf_counter()
        session = db.get_session("bench", session_type=None)
        reads.append(time.perf_counter() - t)
    read = sorted(reads)[len(reads) // 2] if reads else 0.0
    print(json.dumps({
        "n": n, "wall_per_run_s": wall / n, "cpu_per_run_s": cpu / n,
        "first10_s": sorted(laps[:10])[5 if n >= 10 else 0], "last10_s": sorted(laps[-10:])[5 if n >= 10 else 0],
        "read_s": read, "first_read_s": reads[0] if reads else 0.0,
        "runs_read": len(session.runs or []) if session else 0,
        "laps_s": laps,
    }))
    if cleanup is not None:
        cleanup()


if __name__ == "__main__":
    main()
