"""The checker: the code between the reader and the actor (lab `separation`, seed 002).

The reader is a model that read a hostile email. Its answer is free text. The actor has the
tools and follows a fixed plan: lookup_order(number), then send_status(number). Only what
your check() returns ever reaches the actor.

Write check(answer):
- return `answer` itself, unchanged, when it is a str of 1 to 6 ASCII digits (0-9);
- return None for everything else: the reader's NONE (its instruction says "If the email
  has no order number, reply NONE"), empty text, too many digits, any other kind of digit,
  any space or newline, signs, broken text, and anything that is not exactly a str (a
  subclass of str brings its own str()).
- never raise, never repair: no strip(), no int(), no guessing what the reader meant.
- answer the same way every time: earlier calls do not change the next answer.

Check it with:  airlock lab check separation --dir <this folder>
"""


def check(answer):
    raise NotImplementedError("TODO: return answer if it is 1-6 ASCII digits, else None")
