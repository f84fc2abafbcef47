"""Host-side egress enforcement for Docker sandboxes (decisions 5).

Each networked sandbox gets its own Docker bridge network; nftables rules in our own
`table inet sandlot` decide what may leave that bridge (allow > deny > default, plus a
built-in deny of the host and of every special-use range the SSRF guard refuses, from
app/security/special_ranges.py); and a DNS resolver we run
answers the sandbox's lookups, teaching the firewall the IPs of allowed names.

- `policy.py`: the resolved policy as the host enforces it (pure, no I/O);
- `nft.py`: the nftables ruleset text and `nft -f -` (one atomic transaction each);
- `dns.py`: the resolver daemon (`python -m app.backends.docker.egress.dns`);
- `dns_answer.py`: how the resolver answers one query (forward, refuse, learn);
- `dns_limits.py`: each sandbox's share of the resolver;
- `manager.py`: the per-sandbox lifecycle the Docker backend calls;
- `settings.py`: the state directory, DNS upstream and subnet pool, from the environment.
"""
