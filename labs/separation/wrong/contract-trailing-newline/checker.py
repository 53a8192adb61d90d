"""Wrong on purpose: '$' also matches just before a trailing newline."""

import re


def check(answer):
    if isinstance(answer, str) and re.match(r"^[0-9]{1,6}$", answer):
        return answer
    return None
