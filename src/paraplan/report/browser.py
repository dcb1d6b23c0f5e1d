"""Open reports in headless Chromium and check them: every plot drawn, no console errors, nothing fetched
from the network; and take screenshots. Standard library only: the Chrome DevTools protocol over a
hand-made WebSocket client (RFC 6455), so no Selenium, Playwright or driver binary is needed.

    python -m paraplan.report.browser report.html ... [--screenshots DIR] [--scale 0.6]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BINARIES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--mute-audio",
    "--hide-scrollbars",
    "--remote-debugging-port=0",
)


def find_chromium() -> str | None:
    """$PARAPLAN_CHROMIUM, else the first Chromium/Chrome on PATH, else None."""
    env = os.environ.get("PARAPLAN_CHROMIUM")
    if env:
        return env if Path(env).exists() or shutil.which(env) else None
    return next((p for p in map(shutil.which, BINARIES) if p), None)


# ----------------------------------------------------------------------------- WebSocket (client side)
class WebSocket:
    """Text frames over a plain TCP socket, client side (masked), with fragmentation, ping and close."""

    def __init__(self, host: str, port: int, path: str, timeout_s: float) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("the browser closed the connection during the WebSocket handshake")
            head += chunk
        status = head.split(b"\r\n", 1)[0]
        if b" 101 " not in status + b" ":
            raise ConnectionError(f"WebSocket handshake refused: {status.decode(errors='replace')}")
        self.buffer = head.split(b"\r\n\r\n", 1)[1]

    def _read(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("the browser closed the connection")
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        head = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 1 << 16:
            head += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack("!Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(head + mask + masked)

    def send(self, text: str) -> None:
        self._send_frame(0x1, text.encode())

    def recv(self) -> str:
        message = b""
        while True:
            b0, b1 = self._read(2)
            opcode, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._read(8))[0]
            mask = self._read(4) if b1 & 0x80 else b""
            payload = self._read(n)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            if opcode == 0x9:  # ping
                self._send_frame(0xA, payload)
                continue
            if opcode == 0x8:
                raise ConnectionError("the browser closed the WebSocket")
            if opcode in (0x0, 0x1, 0x2):
                message += payload
                if b0 & 0x80:
                    return message.decode()

    def close(self) -> None:
        try:
            self._send_frame(0x8, b"")
        except OSError:
            pass
        self.sock.close()


# ----------------------------------------------------------------------------- the browser
@dataclass
class PageCheck:
    """What a report page did in the browser."""

    path: str
    plots_expected: int
    plots_rendered: int
    plots_with_svg: int
    plots_with_traces: int
    errors: list[str] = field(default_factory=list)
    """Console errors, uncaught exceptions and failed loads."""
    requests: list[str] = field(default_factory=list)
    """Every URL the page asked for other than itself and data: URLs (offline: none)."""
    screenshot: str | None = None
    load_s: float = 0.0

    @property
    def ok(self) -> bool:
        drawn = self.plots_expected == self.plots_rendered == self.plots_with_svg == self.plots_with_traces
        return drawn and not self.errors and not self.requests

    def problems(self) -> list[str]:
        out = [f"{self.path}: {e}" for e in self.errors]
        out += [f"{self.path}: fetched {u} (the report must work offline)" for u in self.requests]
        if not self.plots_expected == self.plots_rendered == self.plots_with_svg == self.plots_with_traces:
            out.append(
                f"{self.path}: {self.plots_expected} plots expected, {self.plots_rendered} rendered, "
                f"{self.plots_with_svg} with an SVG, {self.plots_with_traces} with drawn traces"
            )
        return out


DRAWN = "g.trace path, g.trace .point, g.points path, .heatmaplayer image"
"""What plotly draws for a trace: bar and line paths, scatter points, a heatmap's image."""
_COUNT_JS = (
    f"(() => {{\n  const DRAWN = {json.dumps(DRAWN)};\n"
    + """
  const plots = Array.from(document.querySelectorAll('.paraplan-plot'));
  return JSON.stringify({
    expected: Number(document.body.getAttribute('data-plots') || -1),
    rendered: plots.filter(p => p.getAttribute('data-rendered') === 'true').length,
    svg: plots.filter(p => p.querySelector('svg.main-svg')).length,
    traces: plots.filter(p => p.querySelector(DRAWN)).length,
  });
})()"""
)


class Chromium:
    """One headless Chromium, driven over the DevTools protocol; use as a context manager."""

    def __init__(self, binary: str | None = None, width: int = 1400, height: int = 1000, timeout_s: float = 30):
        binary = binary or find_chromium()
        if binary is None:
            raise FileNotFoundError("no Chromium found (install Debian's `chromium`, or set PARAPLAN_CHROMIUM)")
        self.timeout_s = timeout_s
        self.profile = tempfile.mkdtemp(prefix="paraplan-chromium-")
        self.log = open(Path(self.profile) / "stderr.log", "wb")  # noqa: SIM115 - closed in close()
        args = [binary, *FLAGS, f"--user-data-dir={self.profile}", f"--window-size={width},{height}", "about:blank"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log)
        self.width, self.height = width, height
        self.next_id = 0
        self.events: list[dict] = []
        try:
            port, path = self._devtools_address()
            self.ws = WebSocket("127.0.0.1", port, path, timeout_s)
        except BaseException:
            self.close()
            raise

    def _devtools_address(self) -> tuple[int, str]:
        marker = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Chromium exited with code {self.proc.returncode}: {self._stderr_tail()}")
            lines = marker.read_text().split() if marker.exists() else []
            if len(lines) >= 2:
                return int(lines[0]), lines[1]
            time.sleep(0.05)
        raise TimeoutError(f"Chromium did not open its DevTools port within {self.timeout_s:.0f} s")

    def _stderr_tail(self) -> str:
        self.log.flush()
        return (Path(self.profile) / "stderr.log").read_text(errors="replace")[-2000:]

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            try:
                ws.send(json.dumps({"id": -1, "method": "Browser.close"}))
            except OSError:
                pass
            ws.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict[str, Any]:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def evaluate(self, expression: str, session: str) -> Any:
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session)
        return result.get("result", {}).get("value")

    def check(self, path: str | Path, screenshot: str | Path | None = None, scale: float = 1.0) -> PageCheck:
        """Open `path`, wait until its plots are drawn (or the timeout), and report what happened."""
        url = Path(path).resolve().as_uri()
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.events = []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", {}, session)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False},
            session,
        )
        started = time.monotonic()
        self.call("Page.navigate", {"url": url}, session)
        counts: dict[str, int] = {}
        while time.monotonic() - started < self.timeout_s:
            done = self.evaluate(
                "document.body && document.location.href !== 'about:blank' && "
                "document.body.getAttribute('data-plots-rendered')",
                session,
            )
            if done:
                counts = json.loads(self.evaluate(_COUNT_JS, session))
                break
            time.sleep(0.1)
        else:
            raw = self.evaluate(f"document.body && document.location.href !== 'about:blank' && {_COUNT_JS}", session)
            counts = json.loads(raw) if isinstance(raw, str) else {}
        load_s = time.monotonic() - started
        time.sleep(0.2)  # late console messages
        self.evaluate("1", session)
        check = PageCheck(
            str(path),
            int(counts.get("expected", -1)),
            int(counts.get("rendered", 0)),
            int(counts.get("svg", 0)),
            int(counts.get("traces", 0)),
            errors=_errors(self.events, session),
            requests=_requests(self.events, session, url),
            load_s=load_s,
        )
        if screenshot is not None:
            _screenshot(self, session, screenshot, scale)
            check.screenshot = str(screenshot)
        self.call("Target.closeTarget", {"targetId": target})
        return check


def _errors(events: list[dict], session: str) -> list[str]:
    out = []
    for e in events:
        if e.get("sessionId") != session:
            continue
        method, p = e["method"], e.get("params", {})
        if method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            out.append("uncaught: " + str(d.get("exception", {}).get("description") or d.get("text")))
        elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append("console.error: " + " ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
        elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}".strip())
        elif method == "Network.loadingFailed" and not p.get("canceled"):
            out.append(f"load failed: {p.get('errorText')}")
    return out


def _requests(events: list[dict], session: str, own: str) -> list[str]:
    urls = [
        e["params"]["request"]["url"]
        for e in events
        if e.get("sessionId") == session and e["method"] == "Network.requestWillBeSent"
    ]
    return [u for u in urls if u != own and not u.startswith(("data:", "about:"))]


def _screenshot(browser: Chromium, session: str, path: str | Path, scale: float) -> None:
    metrics = browser.call("Page.getLayoutMetrics", {}, session)
    size = metrics.get("cssContentSize") or metrics["contentSize"]
    clip = {"x": 0, "y": 0, "width": browser.width, "height": size["height"], "scale": scale}
    shot = browser.call(
        "Page.captureScreenshot",
        {"format": "png", "clip": clip, "captureBeyondViewport": True, "optimizeForSpeed": False},
        session,
    )
    Path(path).write_bytes(base64.b64decode(shot["data"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+")
    parser.add_argument("--screenshots", help="folder for one PNG per report (named after it)")
    parser.add_argument("--scale", type=float, default=1.0, help="screenshot scale (0.6: smaller files)")
    parser.add_argument("--width", type=int, default=1400)
    args = parser.parse_args(argv)
    failed = 0
    with Chromium(width=args.width) as browser:
        for report in args.reports:
            shot = Path(args.screenshots) / (Path(report).stem + ".png") if args.screenshots else None
            check = browser.check(report, shot, args.scale)
            status = "ok" if check.ok else "FAILED"
            print(f"{status}: {report}: {check.plots_rendered}/{check.plots_expected} plots in {check.load_s:.1f} s")
            for line in check.problems():
                print(f"  {line}")
            failed += not check.ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
