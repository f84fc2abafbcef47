"""The playground: a session's console and its runs."""
