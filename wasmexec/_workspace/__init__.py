"""A run's files: its private /workspace and /tmp, inputs in, artifacts out, quotas, retention.

Every host access to a directory the guest could write goes through `safefs`:
fd-relative, never following a symlink (the guest can plant dangling ones).
"""
