"""The broker: binds one endpoint per role, routes by the rules in router.py, owns the trace."""
