"""The naive agent: the design airlock exists to avoid, kept to compare against.

One process gives the model the untrusted email *and* the tools, then runs whatever tool
calls the model's answer contains. It uses the same mail parser, model client, catalog and
mock tools (calls.jsonl) as airlock's services, so the two designs can be scored side by
side on the same emails and the same model. Never use this design for real.
"""
