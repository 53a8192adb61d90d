"""Wrong on purpose: str.isdigit() is true for every Unicode digit, not just 0-9."""


def check(answer):
    if isinstance(answer, str) and answer.isdigit() and 1 <= len(answer) <= 6:
        return answer
    return None
