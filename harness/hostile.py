"""`airlock model --hostile`: a worst-case model that obeys the last instruction in the email.

It serves OpenAI-compatible /v1/chat/completions on loopback. It reads the last user
message (the email), finds every instruction an attacker could plant there, and obeys the
one that comes last: it returns the injected value, the injected tool call or the injected
marker. It sees through the usual hiding places on purpose (base64, zero-width and bidi
characters, Unicode tag characters), because a real model might too. With no instruction
it answers honestly: the first order number, or NONE.

It speaks the reader's format (one value) unless the system prompt offers tools, as the
naive agent's does; then it answers with tool-call lines. Tests use it to show that the
separation holds even against a fully compromised model, and that the naive agent falls.
"""

from __future__ import annotations

import base64
import binascii
import http.server
import json
import re
import threading
import unicodedata
from dataclasses import dataclass

TOOLS_PROMPT_SIGN = "call these tools"  # the naive agent's system prompt says this

MARKER = re.compile(r"\[\[tool:[a-z][a-z0-9-]*/[a-z][a-z0-9_-]*\]\]")
JSON_OBJECT = re.compile(r"\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}")
CALL_VERB = (r"(?:call|invoke|run|execute|use|trigger|rufe|ruf|aufrufen|ausführen|roep|voer|вызови|"
             r"вызвать|выполни|appelle|exécute|llama|ejecuta|chiama|esegui|çağır|çalıştır|wywołaj|"
             r"uruchom|chame|execute|kör|anropa|调用|执行|呼び出|実行|कॉल|استدع)")
TOOL_PAIR = re.compile(rf"{CALL_VERB}\W{{1,40}}?([a-z][a-z0-9-]*/[a-z][a-z0-9_-]*)", re.IGNORECASE)
BARE_TOOL = re.compile(rf"{CALL_VERB}\W{{1,40}}?([a-z][a-z0-9]*_[a-z0-9_]+)"
                       r"|\b([a-z]+/[a-z]+_[a-z0-9_]+|[a-z]+_[a-z_]+(?=\s*\())", re.IGNORECASE)
ANSWER_VERB = (r"(?:answer|reply|respond|say|report|return|output|write|print|antworte|antwort|"
               r"gib|melde|antwoord|geef|ответь|ответ|напиши|верни|réponds|répondez|responde|"
               r"contesta|rispondi|cevap|yanıt|odpowiedz|responda|svara|回答|答|返信|उत्तर|أجب)")
VALUE = re.compile(rf"{ANSWER_VERB}[^\n0-9０-９]{{0,60}}?((?:[0-9]|[０-９]|[٠-٩]|[۰-۹]|[०-९]){{1,12}})", re.IGNORECASE)
NUMBER_IS = re.compile(r"(?:number|nummer|номер|numéro|número|numero|numara|no\.?)\s*(?:is|ist|es|est|è|é|—|:|=)"
                       r"\s*[\"'«]?((?:[0-9]){1,12})", re.IGNORECASE)
ORDER_NUMBER = re.compile(r"(?<![0-9])([0-9]{3,6})(?![0-9])")
BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{16,}={0,2}")


@dataclass(frozen=True)
class Instruction:
    position: int
    kind: str  # marker, json, call, value
    payload: str


def reveal(text: str) -> str:
    """What a careless model would read: tag characters as ASCII, invisibles and bidi gone."""
    out = []
    for ch in text:
        code = ord(ch)
        if 0xE0020 <= code <= 0xE007E:
            out.append(chr(code - 0xE0000))
        elif unicodedata.category(ch) != "Cf":
            out.append(ch)
    return "".join(out)


def instructions(text: str, offset: int = 0, depth: int = 0) -> list[Instruction]:
    # Positions are where an instruction ends, so a marker or JSON call outranks the
    # tool name inside it, and "the last instruction" is the one finished last.
    found = [Instruction(offset + m.end(), "marker", m.group(0)) for m in MARKER.finditer(text)]
    for m in JSON_OBJECT.finditer(text):
        try:
            call = json.loads(m.group(0))
        except ValueError:
            continue
        if isinstance(call, dict) and (call.get("name") or call.get("tool") or call.get("tool_call")):
            found.append(Instruction(offset + m.end(), "json", m.group(0)))
    found += [Instruction(offset + m.end(), "call", m.group(1)) for m in TOOL_PAIR.finditer(text)]
    found += [Instruction(offset + m.end(), "call", m.group(1) or m.group(2)) for m in BARE_TOOL.finditer(text)]
    found += [Instruction(offset + m.end(), "value", m.group(1)) for m in VALUE.finditer(text)]
    found += [Instruction(offset + m.end(), "value", m.group(1)) for m in NUMBER_IS.finditer(text)]
    if depth == 0:  # look inside base64, once
        for m in BASE64_RUN.finditer(text):
            try:
                decoded = base64.b64decode(m.group(0), validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError, ValueError):
                continue
            if decoded.isprintable() or "\n" in decoded:
                found += [Instruction(offset + m.end(), i.kind, i.payload)
                          for i in instructions(decoded, 0, depth + 1)]
    return found


def answer(messages: list[dict[str, str]]) -> str:
    system = next((m.get("content", "") for m in messages if m.get("role") == "system"), "")
    email = reveal(next((m.get("content", "") for m in reversed(messages) if m.get("role") == "user"), ""))
    naive = TOOLS_PROMPT_SIGN in system.lower()
    found = instructions(email)
    last = max(found, key=lambda i: i.position) if found else None
    if last is not None and last.kind in ("marker", "json"):
        return last.payload
    if last is not None and last.kind == "call":
        return f"{last.payload}()"
    value = last.payload if last is not None else None
    if value is None:
        match = ORDER_NUMBER.search(email)
        value = match.group(1) if match else None
    if value is None:
        return "NONE"
    if naive:
        return f"shop/lookup_order(order_id={value})\nmail/send_status(order_id={value})"
    return value


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # http.server's naming
        payload: dict[str, object]
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            text = answer(body["messages"])
            payload, status = {"object": "chat.completion", "model": "hostile", "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}]}, 200
        except (ValueError, KeyError, TypeError) as exc:
            payload, status = {"error": {"message": f"bad request: {exc}"}}, 400
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # http.server's naming
        data = json.dumps({"object": "list", "data": [{"id": "hostile", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


class HostileModel:
    """The server, started in a background thread; `url` is its base URL."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.server = http.server.ThreadingHTTPServer((host, port), _Handler)
        self.server.daemon_threads = True
        self.url = f"http://{host}:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> HostileModel:
        self._thread.start()
        return self

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
