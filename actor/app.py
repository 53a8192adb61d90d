"""The actor's handle(): Passed in, the plan run with that value, Done out."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import msgspec
import zmq

from actor import catalog as catalog_module
from actor.plan import BoundStep, bind
from actor.tools import CallLog
from airlock.service import serve as serve_worker
from airlock.settings import Settings
from airlock.task import Task
from airlock.transport import Channel, ZmqChannel
from airlock.wire import Call, Done, Message, Passed, outbound_decoder


class Actor:
    def __init__(self, plan: list[BoundStep], value_type: Any, tools: CallLog) -> None:
        self.plan, self.value_type, self.tools = plan, value_type, tools

    def handle(self, message: Message) -> list[Message]:
        match message:
            case Passed(message_id=message_id, value=value):
                return [self.run(message_id, value)]
        return []  # this role's decoder admits only Passed

    def run(self, message_id: str, value: int | str) -> Done:
        # The validator already checked the value; checking again costs nothing and means
        # a bug or a forged message upstream still cannot put free text into a tool call.
        try:
            value = msgspec.convert(value, self.value_type, strict=True)
        except msgspec.ValidationError as exc:
            return Done(message_id=message_id, outcome="rejected", reason=f"value is not of the narrow type: {exc}")
        calls = []
        for step in self.plan:
            args = step.arguments(value)
            call = Call(step=step.number, server=step.tool.server, tool=step.tool.tool, args=args, status="ok")
            try:
                self.tools.call(message_id, step.number, step.tool.server, step.tool.tool, args)
            except Exception as exc:  # the tool boundary: any failure is a typed failed call
                calls.append(msgspec.structs.replace(call, status="error", error=f"{type(exc).__name__}: {exc}"))
                return Done(message_id=message_id, outcome="failed", reason=f"step {step.number} failed: {exc}", calls=calls)
            calls.append(call)
        return Done(message_id=message_id, outcome="completed", calls=calls)


def build(settings: Settings, task: Task, catalog_path: Path = catalog_module.DEFAULT_PATH) -> Actor:
    """Load the catalog and bind the plan; raises CatalogError before any message is read."""
    plan = bind(task, catalog_module.load(catalog_path))
    return Actor(plan, task.value_decoder(), CallLog(settings.calls_path))


def serve(settings: Settings, task: Task, stop: threading.Event, channel: Channel | None = None) -> None:
    actor = build(settings, task)
    channel = channel or ZmqChannel(zmq.Context.instance(), settings.endpoint("actor"), settings.max_frame_bytes)
    try:
        serve_worker(channel, outbound_decoder("actor"), actor.handle, settings.worker_credit, stop)
    finally:
        channel.close()
        actor.tools.close()
