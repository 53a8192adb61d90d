"""The naive agent: the design airlock exists to avoid, kept to compare against.

One process gives the model the untrusted email *and* the tools, then runs whatever tool
calls the model's answer contains. It uses the same mail parser, model client, catalog and
mock tools (calls.jsonl) as airlock's services, so the two designs can be scored side by
side on the same emails and the same model. Never use this design for real.

agent.py runs one email; parse.py reads calls out of the model's text; grammar.py shapes
that text for a small model; models.py chooses the model (AIRLOCK_NAIVE_MODEL); run.py is
`airlock naive`; service.py serves the agent over HTTP for the page's naive pane.
"""
