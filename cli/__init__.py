"""The command line: every command's dispatch (`airlock ...`), one error handler, one exit-code table."""
