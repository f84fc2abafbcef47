"""Docker engines owned by another host's node (issue 28 item 2, decisions 17).

A Docker engine belongs to one host: its socket, the egress rules and resolver, loop
disks and leftovers all live there. A process that does not own an engine reaches it
through a node of that host (`flask node`): every backend call becomes a message on a
Redis list the node serves, and the node's answer (with a command's live output) comes
back on a reply list. `codec` is the wire format, `client` the backend a non-owning
process uses, `node` the serving side.
"""
