"""Wrong on purpose: passes the reader's NONE on to the actor, as if it were a value."""

import re


def check(answer):
    if answer == "NONE":
        return answer
    if isinstance(answer, str) and re.fullmatch(r"[0-9]{1,6}", answer):
        return answer
    return None
