"""Public error type for expected setup failures."""


class SetupError(RuntimeError):
    """Report an actionable environment, release, or project error."""
