"""One module of graders per lab, each `grade(student_dir) -> Verdict`, named in lab.toml."""
