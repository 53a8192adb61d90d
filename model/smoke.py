"""The model image's build check: start the server as the image will, then prove it answers a
chat completion and keeps its closed endpoints closed. Standard library only (the image has
no Python packages); run at build time, so a broken build fails there, not in the lab.

    python3 smoke.py /opt/model/serve.sh
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

BASE = "http://127.0.0.1:8080"


def status(path: str, body: dict | None = None) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(BASE + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def main(serve: str) -> None:
    server = subprocess.Popen([serve])
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if status("/health")[0] == 200:
                    break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"smoke: the server did not come up (exit {server.poll()})")
            time.sleep(0.5)
        code, raw = status("/v1/chat/completions", {"model": "smollm2", "max_tokens": 4, "temperature": 0,
                                                    "messages": [{"role": "user", "content": "Say hi."}]})
        assert code == 200 and json.loads(raw)["choices"][0]["message"]["content"] is not None, (code, raw[:200])
        props = json.loads(status("/props")[1])
        assert props["total_slots"] >= 1, props
        # Closed on purpose (serve.sh): tools, the slots monitor, changing properties.
        for path, body in (("/tools", None), ("/slots", None), ("/props", {"n_parallel": 8})):
            code, _ = status(path, body)
            assert code in (403, 404, 501), f"{path} answered {code}"
        print("smoke: chat completion answered; /tools, /slots and POST /props closed")
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main(sys.argv[1])
