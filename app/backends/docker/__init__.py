"""The Docker backend: sandboxes as hardened containers on a local or remote engine, with their
disks, files, images, exec I/O, the orphan reaper and the egress firewall (egress/).
"""
