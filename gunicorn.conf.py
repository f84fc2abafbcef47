"""Gunicorn settings for `make run` (and the stream, run and slow-client tests, which
start the same).

Live install streams (reference 7.3, 7.5) are long requests that mostly sleep. A gthread
worker gives each one a thread, so the pool is sized for hundreds: an idle stream costs a
parked thread (a small resident stack) and no database connection, and the app caps open
streams and web terminals together at SKILL_STREAMS_MAX (224) so at least 32 threads
always remain for ordinary pages.
See docs/streams.md for why this design over gevent or a separate streaming process.

The worker class is gthread's subclass in app/serving.py: a thread is given only a
complete request head, read in the worker's event loop, so clients that send half a head
and stall cost a socket each, not a thread (closed 10 s after their first byte).
"""

worker_class = "app.serving.HeaderBufferingWorker"
workers = 1
threads = 256
worker_connections = 1000  # open sockets (streams, keep-alive, heads arriving)
keepalive = 5
