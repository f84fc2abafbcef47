"""Shared machinery of the url_map sweeps (route guards, secret canaries, OpenAPI, fuzzing).

Everything here works from `app.url_map` and the attributes views carry (`guard`, `public`,
`api_doc`), never from a list of routes, so routes added later are swept automatically.
"""
