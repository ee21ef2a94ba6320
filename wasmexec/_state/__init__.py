"""State that outlives a process, on a directory that replicas may share: key, sealed files, sessions, stores.

Builds on `wasmexec._workspace` (safe file access, the artifact store), which never imports it.
"""
