"""Fills an agno 2.x SQLite database for the benchmarks (scripts/bench-migration.sh,
scripts/bench-copy.sh).

    python bench-seed-v2.py PATH SESSIONS RUNS_PER_SESSION MEMORIES

PATH must already hold agno 2.9.0's tables (interop/agno_driver.py write-v2 creates them);
the sessions write-v2 left are deleted. Rows are written in the encoding agno 2.9.0's SqliteDb
uses: a session's JSON columns hold json.dumps of the value, dumped again by SQLAlchemy's JSON
type, and its runs are one blob; memory columns are dumped once. 9 in 10 sessions are agent
sessions; every 10th is a team session whose runs alternate team run / member run
(parent_run_id). A run carries ~1 KB (content, two messages, metrics), as a chat turn does.
Memories belong to 500 users.
"""

import json
import sqlite3
import sys

path, sessions, runs, memories = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])


def enc(v):
    return json.dumps(json.dumps(v)) if v is not None else "null"


con = sqlite3.connect(path)
con.execute("DELETE FROM agno_sessions")
words = "the quick brown fox jumps over the lazy dog while the agent answers politely "
rows = []
for s in range(sessions):
    sid = f"sess-{s:06d}"
    team = s % 10 == 9
    user = f"user-{s % 500}"
    t0 = 1_700_000_000 + s * 100
    blob = []
    for r in range(runs):
        member = team and r % 2 == 1
        run = {"run_id": f"{sid}-run-{r:03d}", "session_id": sid, "user_id": user,
               "content": f"answer {r} " + words * 4, "content_type": "str",
               "model": "gpt-4o", "model_provider": "OpenAI", "status": "COMPLETED",
               "created_at": t0 + r,
               "messages": [{"role": "user", "content": f"question {r} " + words, "created_at": t0 + r},
                            {"role": "assistant", "content": f"answer {r} " + words * 2, "created_at": t0 + r}],
               "metrics": {"input_tokens": 120 + r, "output_tokens": 80, "total_tokens": 200 + r, "duration": 1.25}}
        if team and not member:
            run["team_id"] = "team-1"
        else:
            run["agent_id"] = "member-1" if member else "agent-1"
        if member:
            run["parent_run_id"] = f"{sid}-run-{r - 1:03d}"
        blob.append(run)
    rows.append((sid, "team" if team else "agent", None if team else "agent-1", "team-1" if team else None,
                 user, enc({"session_name": f"Session {s}"}), "null", "null", "null", enc({"source": "bench"}),
                 enc(blob), "null", t0, t0 + runs))
con.executemany(
    "INSERT INTO agno_sessions (session_id, session_type, agent_id, team_id, user_id, session_data, agent_data, "
    "team_data, workflow_data, metadata, runs, summary, created_at, updated_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
con.executemany(
    "INSERT INTO agno_memories (memory_id, memory, input, agent_id, team_id, user_id, topics, feedback, "
    "created_at, updated_at) VALUES (?, ?, ?, ?, NULL, ?, ?, NULL, ?, ?)",
    [(f"mem-{m:06d}", json.dumps(f"user {m % 500} likes topic {m} and prefers short answers"),
      f"remember topic {m}", "agent-1", f"user-{m % 500}", json.dumps(["preferences", f"topic-{m % 20}"]), 1_700_000_000 + m,
      1_700_000_000 + m) for m in range(memories)])
con.commit()
con.execute("VACUUM")
con.close()
