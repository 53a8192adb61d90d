"""Red-team content and tools: the naive agent, the corpora's import, prompt variants and
recordings. Uses the harness; no service imports it."""
