"""Gunicorn settings for `make run` (and the stream capacity test, which starts the same).

Live install streams (reference 7.3, 7.5) are long requests that mostly sleep. A gthread
worker gives each one a thread, so the pool is sized for hundreds: an idle stream costs a
parked thread (a small resident stack) and no database connection, and the app caps open
streams at SKILL_STREAMS_MAX (224) so at least 32 threads always remain for ordinary pages.
See docs/streams.md for why this design over gevent or a separate streaming process.
"""

worker_class = "gthread"
workers = 1
threads = 256
worker_connections = 1000  # open sockets (streams + keep-alive) the worker accepts
keepalive = 5
