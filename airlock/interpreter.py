"""How the project starts its own Python modules: this interpreter with -P (safe path), so
that neither the working folder (`-m`, `-c`) nor a script's folder is put first on sys.path.

`airlock lab ...` run where a student cloned the repository (beside a folder named airlock)
would otherwise import that folder as the kernel; a class folder or a student's folder may
hold a package of any name. The project's modules are found where Python was told to find
them: the installed package, or PYTHONPATH.
"""

from __future__ import annotations

import sys


def python_command(*arguments: str) -> list[str]:
    """[this interpreter, "-P", *arguments], for subprocess and os.execv."""
    return [sys.executable, "-P", *arguments]
