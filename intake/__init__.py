"""The SMTP intake: a lab front door so any mail client can hand emails to the broker.

It is a client of the broker's intake endpoint, exactly like `airlock inject`: it holds no
tool code, reads nothing it receives, and answers 250 only once the broker has accepted the
email (451 otherwise, so the sender keeps it and tries again).
"""
