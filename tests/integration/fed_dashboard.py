"""python -m tests.integration.fed_dashboard PORT DATA_DIR: the page's app, no broker, fed
synthetic trace lines (500 cards that keep changing, so a snapshot is large), served by the
same server code as `python -m dashboard`. The stream tests run it and measure it."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from airlock import settings as settings_module
from dashboard import config as config_module
from dashboard.__main__ import listen, serve
from dashboard.app import create_app

CARDS = 500
FEED_INTERVAL_S = 0.002


async def main(port: int, data_dir: Path) -> None:
    settings = settings_module.load({"AIRLOCK_DATA_DIR": str(data_dir)})
    config = config_module.load(port=port)  # the stream bounds come from the environment, as in production
    app = create_app(settings, config, [("shop", "lookup_order"), ("mail", "send_status")], live=False)

    async def feed() -> None:
        n = 0
        while True:
            n += 1
            app.state.hub.publish([{"at": "2026-11-30T10:00:00.000000Z", "message_id": f"m-{n % CARDS}",
                                    "stage": "reader", "event": "model_answer", "answer": "x" * 1500,
                                    "source": "model"}])
            await asyncio.sleep(FEED_INTERVAL_S)

    sock = listen("127.0.0.1", port)
    feeding = asyncio.get_running_loop().create_task(feed())
    print("ready", flush=True)
    try:
        await serve(app, sock, config.stream_stall_s, config.max_connections)
    finally:
        feeding.cancel()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), Path(sys.argv[2])))
