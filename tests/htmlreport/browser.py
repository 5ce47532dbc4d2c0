"""Headless Chromium driven over the DevTools protocol (a websocket, `websocket-client`): open a
page, evaluate script in it, click where an element is, take screenshots, and record every
network request the page makes. Chromium runs with a fresh profile and everything that would
phone home switched off."""
from __future__ import annotations

import base64
import itertools
import json
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--remote-debugging-port=0")


def chromium() -> str | None:
    """The Chromium executable, when one is installed."""
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Browser:
    """One headless Chromium with one page; use as a context manager."""

    def __init__(self, exe: str, width: int = 1400, height: int = 900, timeout: float = 60.0):
        import websocket
        self.profile = tempfile.mkdtemp(prefix="fusec-chromium-")
        self.proc = subprocess.Popen([exe, *FLAGS, f"--user-data-dir={self.profile}", f"--window-size={width},{height}",
                                      "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        url = self._devtools_url(timeout)
        self.ws = websocket.create_connection(url, timeout=timeout, suppress_origin=True)
        self.ids = itertools.count(1)
        self.events: list[dict] = []
        self.session = None
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Network", "Runtime"):
            self.call(f"{domain}.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def _devtools_url(self, timeout: float) -> str:
        end = time.time() + timeout
        seen = []
        while time.time() < end:
            line = self.proc.stderr.readline()
            if not line:
                if self.proc.poll() is not None:
                    break
                continue
            seen.append(line)
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            if m:
                return m.group(1)
        self.close()
        raise RuntimeError("chromium did not start:\n" + "".join(seen[-20:]))

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        try:
            if getattr(self, "ws", None) is not None:
                self.ws.close()
        finally:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            shutil.rmtree(self.profile, ignore_errors=True)

    # ---- the protocol --------------------------------------------------------------------
    def call(self, method: str, **params) -> dict:
        n = next(self.ids)
        msg = {"id": n, "method": method, "params": params}
        if self.session is not None:
            msg["sessionId"] = self.session
        self.ws.send(json.dumps(msg))
        while True:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == n:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 30.0) -> dict:
        for i, e in enumerate(self.events):
            if e.get("method") == method:
                return self.events.pop(i)
        end = time.time() + timeout
        while time.time() < end:
            e = json.loads(self.ws.recv())
            if e.get("method") == method:
                return e
            self.events.append(e)
        raise TimeoutError(method)

    # ---- what tests do -------------------------------------------------------------------
    def open(self, path: Path) -> float:
        """Load the file and wait until it is painted; returns the seconds from the request to
        the second animation frame after the load event."""
        url = Path(path).resolve().as_uri()
        self._drain()
        self.events.clear()                 # requests() counts from here
        t0 = time.perf_counter()
        self.call("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")
        self.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))", wait=True)
        return time.perf_counter() - t0

    def evaluate(self, expr: str, wait: bool = False):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=wait)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def click(self, selector: str) -> None:
        """A real mouse click at the middle of the element (scrolled into view first)."""
        at = self.evaluate(f"(() => {{ const el = document.querySelector({json.dumps(selector)});"
                           "if (!el) return null; el.scrollIntoView({block: 'center', inline: 'center'});"
                           "const r = el.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        if at is None:
            raise LookupError(f"no element matches {selector}")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=at[0], y=at[1], button="left", clickCount=1)

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        Path(path).write_bytes(base64.b64decode(data))
        return Path(path)

    def requests(self) -> list[str]:
        """The URL of every request the page made so far."""
        self._drain()
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]

    def _drain(self) -> None:
        self.ws.settimeout(0.2)
        try:
            while True:
                self.events.append(json.loads(self.ws.recv()))
        except Exception:       # the socket's timeout: nothing more queued
            pass
        finally:
            self.ws.settimeout(60)

