"""A student's functions run in a confined child process (Landlock, seccomp, rlimits, a warden).

Loaded only by the two services that plug a student's file in (validator, actor) and by the
course's graders; the kernel's settings hold only the plug's value (airlock.plugs)."""
