"""The actor: holds the tools, sees only checked values, runs only the fixed plan."""
