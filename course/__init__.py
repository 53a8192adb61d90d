"""The labs' engine: catalog, runner, graders, grading, phases and progress. Uses the harness;
no service imports it."""
