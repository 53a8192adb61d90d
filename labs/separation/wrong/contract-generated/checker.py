"""Wrong on purpose: refuses exactly the digit characters the lesson shows, and trusts
isdigit() for the rest; the hidden cases find a digit it never listed."""

LISTED = set("\u0664\u0661\u06f4\u06f1\uff14\uff11\u096a\u0967\U0001d7d2\U0001d7cf\u00b2")


def check(answer):
    if not isinstance(answer, str) or not 1 <= len(answer) <= 6:
        return None
    if any(ch in LISTED for ch in answer):
        return None
    return answer if answer.isdigit() else None
