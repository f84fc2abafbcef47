"""Published skills under skills_corpus/ are test data (some ship their own tests): never
collect them."""

collect_ignore_glob = ["skills_corpus/*"]
