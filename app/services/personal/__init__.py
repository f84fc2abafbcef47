"""Members' own variables: stored values, their resolution into a run, and capture from a run."""
