"""agno 3.1.10's side of the append-runs benchmark: N runs of ~2 KB appended one at a time
to one session with `upsert_run`, then the session read back. Prints one JSON object.

    python bench_agno.py sqlite:PATH N
    python bench_agno.py postgres:URL#SCHEMA N
"""

import json
import os
import sys
import time

from agno_driver import open_db


def main():
    target, n = sys.argv[1], int(sys.argv[2])
    from agno.run.agent import RunOutput
    from agno.run.base import RunStatus
    from agno.session.agent import AgentSession

    db = open_db(target)
    db.upsert_session(AgentSession(session_id="bench", agent_id="bench-agent", user_id="bench-user", created_at=int(time.time())))
    payload = "x" * 2000
    laps = []
    wall0, cpu0 = time.perf_counter(), os.times().user
    for i in range(n):
        t = time.perf_counter()
        run = RunOutput(run_id=f"run-{i}", agent_id="bench-agent", session_id="bench", user_id="bench-user",
                        content=payload, status=RunStatus.completed)
        db.upsert_run(run, session_id="bench", user_id="bench-user", run_index=i)
        laps.append(time.perf_counter() - t)
    wall, cpu = time.perf_counter() - wall0, os.times().user - cpu0
    t = time.perf_counter()
    session = db.get_session("bench", session_type=None)
    read = time.perf_counter() - t
    print(json.dumps({
        "n": n, "wall_per_run_s": wall / n, "cpu_per_run_s": cpu / n,
        "first10_s": sorted(laps[:10])[5 if n >= 10 else 0], "last10_s": sorted(laps[-10:])[5 if n >= 10 else 0],
        "read_s": read, "runs_read": len(session.runs or []),
    }))


if __name__ == "__main__":
    main()
