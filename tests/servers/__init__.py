"""MCP test servers (run as scripts) and their smoke tests."""
