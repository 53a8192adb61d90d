"""Wrong on purpose: an off-by-one on the length."""

import re


def check(answer):
    if isinstance(answer, str) and re.fullmatch(r"[0-9]{1,7}", answer):
        return answer
    return None
