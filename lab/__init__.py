"""`python -m lab`: the alias of `airlock lab` (the labs' commands) and of the tools no service
runs. The labs' engine is course/, the tools' dispatch cli/; no service imports either, and no
service image carries them."""
