"""The trainers' live page: emails crossing the airlock, next to a naive agent.

The dashboard only *reads*: the broker's trace stream (a SUB socket) and, where the data
folder is readable, trace.jsonl. It may *inject* emails through the broker's intake, as
`airlock inject` does. It holds no socket to the reader's, validator's or actor's
endpoint and imports no service code (tests/unit/test_dashboard.py walks its imports).

    feed.py        the trace subscription (SUB + file tail), deduplicated
    state.py       the pure reducer: trace records -> cards, counters, queue
    stream.py      the board shared by every open page, fanned out as server-sent events
    inject.py      page text and ready emails -> Emails for the intake
    scenario.py    the guided scenario file: its schema, strictly decoded, for GET /api/scenario
    naive_pane.py  the same emails through `airlock naive`, one subprocess each
    app.py         the Starlette routes and the security headers
    config.py      its own settings (AIRLOCK_DASHBOARD_*, AIRLOCK_NAIVE_MODEL_URL)
    __main__.py    python -m dashboard: uvicorn, signals, exit 78 on bad configuration
"""
