"""Drives agno 3.1.10's Redis run-event stream (`agno.os.event_streams.redis.RedisEventStream`)
against the Redis server the Rust tests use, so both sides publish and tail one run.

    python agno_events_driver.py COMMAND REDIS_URL KEY_PREFIX RUN_ID [AFTER]

KEY_PREFIX is agno's `key_prefix` (e.g. `agno_ct_x:os:events:`). Commands:
    publish   begin attempt 1, mark the run RUNNING, add three RunContentEvents ("py-0".."py-2")
              and complete it COMPLETED; print the indices
    tail      tail the run from AFTER (-1: from the start) until it ends; print
              [[index, sse], ...] as JSON
    cancel    cancel the run with agno's RedisRunCancellationManager (KEY_PREFIX is then
              its `key_prefix`, e.g. `agno_ct_x:run:cancellation:`); print whether it was
              registered
"""

import asyncio
import json
import logging
import sys


def send_agno_logs_to_stderr():
    """agno logs INFO lines to stdout when it is not a terminal (agno/utils/log.py);
    stdout carries this driver's JSON, so move them to stderr."""
    import agno.utils.log  # noqa: F401  (builds agno's loggers)

    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if name.startswith("agno") and isinstance(logger, logging.Logger):
            for handler in logger.handlers:
                if getattr(handler, "console", None) is not None:
                    handler.console.file = sys.stderr
                elif isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
                    handler.setStream(sys.stderr)


async def main():
    send_agno_logs_to_stderr()
    command, url, prefix, run_id = sys.argv[1:5]
    after = int(sys.argv[5]) if len(sys.argv) > 5 else -1
    from redis.asyncio import Redis

    from agno.os.event_streams.redis import RedisEventStream
    from agno.run.agent import RunContentEvent
    from agno.run.base import RunStatus

    redis = Redis.from_url(url)
    if command == "cancel":
        from agno.run.cancellation_management.redis_cancellation_manager import (
            RedisRunCancellationManager,
        )

        manager = RedisRunCancellationManager(async_redis_client=redis, key_prefix=prefix)
        print(json.dumps(await manager.acancel_run(run_id)))
        await redis.aclose()
        return
    stream = RedisEventStream(redis, key_prefix=prefix, block_ms=1000)
    if command == "publish":
        await stream.begin_attempt(run_id, 1)
        await stream.set_run_status(run_id, RunStatus.running, generation=1)
        indices = []
        for i in range(3):
            event = RunContentEvent(run_id=run_id, agent_id="py-agent", content=f"py-{i}")
            indices.append(await stream.add_event(run_id, event, generation=1))
        await stream.complete_run(run_id, RunStatus.completed, generation=1)
        print(json.dumps(indices))
    elif command == "reopen":
        floor = None if after < 0 else after
        print(json.dumps(await stream.reopen_run(run_id, floor=floor)))
    elif command == "tail":
        seen = []
        async for index, sse in stream.tail(run_id, None if after < 0 else after):
            seen.append([index, sse])
        print(json.dumps(seen))
    else:
        raise SystemExit(f"unknown command {command}")
    await stream.aclose()
    await redis.aclose()


asyncio.run(main())
