"""airlock: an agent split so that untrusted text never meets the power to act.

This package is the shared kernel, the one every service image carries. Nothing in it can
call a tool: it holds the wire contract, the persisted records (trace and call log), task
files, the trace, the transport, settings and errors. The operator's command line is cli/
(`python -m airlock` reaches it), the operator's tools ops/, a student's code runs through
studentcode/ (the validator's and the actor's only).
"""

__version__ = "0.1.0"
