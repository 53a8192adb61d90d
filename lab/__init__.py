"""Hands-on labs: each lesson of the course as a piece of code the student writes and sees
run inside the real separated pipeline. Tooling around the runtime: no service imports it,
and no service image carries it."""
