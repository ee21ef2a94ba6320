"""State that outlives a process: the state key, and (later) what lives under the state directory."""
