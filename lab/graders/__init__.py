"""Graders: one function per checkpoint, `grade(student_dir) -> Verdict`, named in each lab.toml."""
