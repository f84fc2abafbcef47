"""Job kinds, the runner that executes a row, and the dispatchers that feed it."""
