"""The checker: the code between the reader and the actor (lab `separation`, seed 002).

Reference solution. The pattern is matched in full (fullmatch, not match with '$', which
also matches before a trailing newline), and [0-9] is spelled out: \\d and str.isdigit()
both accept Arabic-Indic, fullwidth and other Unicode digits.
"""

import re

ORDER_NUMBER = re.compile(r"[0-9]{1,6}")


def check(answer):
    if type(answer) is not str:
        return None
    return answer if ORDER_NUMBER.fullmatch(answer) else None
