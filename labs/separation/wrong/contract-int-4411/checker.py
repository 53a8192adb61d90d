"""Wrong on purpose: assumes the answer is always a str, so an int makes it crash."""

import re


def check(answer):
    return answer if re.fullmatch(r"[0-9]{1,6}", answer) else None
