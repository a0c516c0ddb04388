"""moto's S3 server with its requests applied one at a time.

moto's `moto_server` serves every request on its own thread, and its S3 `PutObject` checks
`If-Match` / `If-None-Match` in the request handler, well before it stores the object, with no
lock between the two: two concurrent conditional writes that both match can both land, one
silently overwriting the other. Real S3 evaluates the condition atomically, and the JSON
adapter's compare-and-swap relies on that (its 8-writer test once kept 199 of 200 runs on
moto). This serves moto's own WSGI app (the same routes and request handler `moto_server`
uses) behind one lock: connections are still served by threads, but each request is applied
whole before the next one starts.

    python moto-serial.py -H 127.0.0.1 -p 58001
"""

import argparse
import os
import threading

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import run_simple


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=5000)
    args = parser.parse_args()
    # moto reads its own port from MOTO_PORT, as moto_server sets it.
    os.environ.setdefault("MOTO_PORT", str(args.port))

    app = DomainDispatcherApplication(create_backend_app)
    app.debug = True
    lock = threading.Lock()

    def serial(environ, start_response):
        with lock:
            # The body is produced inside the lock, so the request is applied whole.
            return list(app(environ, start_response))

    run_simple(args.host, args.port, serial, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
