"""airlock: an agent split so that untrusted text never meets the power to act.

This package is the shared kernel. Nothing in it can call a tool: it holds the wire
contract, the persisted records (trace and call log), task files, the trace, the
transport, settings, errors and the CLI.
"""

__version__ = "0.1.0"
