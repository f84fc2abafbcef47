"""Authentication (session, bearer, API key) and the per-route guard."""
