#!/usr/bin/env python3
"""Looks at an HTML page the way a person does, in headless chromium: how wide it lays out
at a window width, and pictures of parts of it.

    html_shots.py PAGE.html [--width 1280] [--top OUT.png [--height 900]]
                  [--element CSS-SELECTOR OUT.png]... [--slices PREFIX]

Prints one JSON object on standard output:
  {"width": 1280, "page_width": ..., "sideways": [...], "shots": [...]}
where `page_width` is the document's scroll width (more than `width`: the page scrolls
sideways) and `sideways` names every element whose content is wider than its box while it
lets the reader scroll it (overflow auto or scroll): a table or block one has to scroll
sideways to read. `--top` takes the first `--height` pixels of the page; `--element` the
box of the first element the selector matches (the page is laid out at `--width`);
`--slices` the whole page in pieces of `--height` pixels, PREFIX-00.png, PREFIX-01.png …

It talks to chromium through the DevTools protocol over a pipe (--remote-debugging-pipe):
nothing listens on a port, nothing but Python's standard library is needed. Exit status 0
when every picture was taken, 1 when chromium failed or a selector matched nothing.
"""

import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time


class Browser:
    """One headless chromium, driven over the DevTools pipe (fd 3 in, fd 4 out)."""

    def __init__(self, binary, profile):
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()

        def fds():
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        self.proc = subprocess.Popen(
            [
                binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-pipe",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            pass_fds=(3, 4),
            preexec_fn=fds,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.buf = b""
        self.next_id = 0
        self.events = []

    def _read(self, deadline):
        while b"\0" not in self.buf:
            if time.monotonic() > deadline:
                raise RuntimeError("chromium did not answer within 60 s")
            chunk = os.read(self.from_chrome, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed its pipe")
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method, params=None, session=None):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + 60
        while True:
            m = self._read(deadline)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, name, session):
        deadline = time.monotonic() + 60
        while True:
            for i, m in enumerate(self.events):
                if m.get("method") == name and m.get("sessionId") == session:
                    del self.events[i]
                    return m
            self.events.append(self._read(deadline))

    def close(self):
        try:
            self.call("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


SIDEWAYS = """
JSON.stringify(Array.from(document.querySelectorAll('*')).filter(e => {
  const o = getComputedStyle(e).overflowX;
  return (o === 'auto' || o === 'scroll') && e.scrollWidth > e.clientWidth + 1;
}).map(e => e.tagName.toLowerCase() + (e.className ? '.' + e.className : '')
            + ' (' + e.scrollWidth + ' px in ' + e.clientWidth + ')'))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("page")
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--height", type=int, default=900)
    ap.add_argument("--top", metavar="OUT.png")
    ap.add_argument("--element", nargs=2, action="append", default=[],
                    metavar=("SELECTOR", "OUT.png"))
    ap.add_argument("--slices", metavar="PREFIX")
    ap.add_argument("--chromium", default=None)
    args = ap.parse_args()

    binary = args.chromium or next(
        (b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
    if binary is None:
        print("html_shots.py: no chromium found (apt-get install chromium)", file=sys.stderr)
        return 1
    url = "file://" + os.path.abspath(args.page)
    profile = tempfile.mkdtemp(prefix="html-shots-")
    browser = Browser(binary, profile)
    out = {"width": args.width, "shots": []}
    try:
        target = browser.call("Target.createTarget", {"url": "about:blank"})
        s = browser.call("Target.attachToTarget",
                         {"targetId": target["targetId"], "flatten": True})["sessionId"]
        browser.call("Emulation.setDeviceMetricsOverride",
                     {"width": args.width, "height": args.height,
                      "deviceScaleFactor": 1, "mobile": False}, s)
        browser.call("Page.enable", {}, s)
        browser.call("Page.navigate", {"url": url}, s)
        browser.wait_event("Page.loadEventFired", s)

        def value(expr):
            r = browser.call("Runtime.evaluate", {"expression": expr, "returnByValue": True}, s)
            return r["result"].get("value")

        out["page_width"] = value("document.documentElement.scrollWidth")
        out["page_height"] = value("document.documentElement.scrollHeight")
        out["sideways"] = json.loads(value(SIDEWAYS))

        def shoot(path, x, y, w, h):
            shot = browser.call("Page.captureScreenshot", {
                "format": "png", "captureBeyondViewport": True,
                "clip": {"x": x, "y": y, "width": w, "height": h, "scale": 1}}, s)
            with open(path, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
            out["shots"].append({"file": path, "y": y, "height": h})

        if args.top:
            shoot(args.top, 0, 0, args.width, min(args.height, out["page_height"]))
        for selector, path in args.element:
            rect = value(
                "(() => { const e = document.querySelector(%s); if (!e) return null;"
                " const r = e.getBoundingClientRect();"
                " return [r.left + scrollX, r.top + scrollY, r.width, r.height]; })()"
                % json.dumps(selector))
            if rect is None:
                print(f"html_shots.py: nothing matches {selector}", file=sys.stderr)
                return 1
            # The element's box with a margin, across the page's width.
            y = max(rect[1] - 12, 0)
            shoot(path, 0, y, args.width, rect[3] + 24)
        if args.slices:
            y, i = 0, 0
            while y < out["page_height"]:
                h = min(args.height, out["page_height"] - y)
                shoot(f"{args.slices}-{i:02d}.png", 0, y, args.width, h)
                y, i = y + h, i + 1
    except (RuntimeError, OSError) as e:
        print(f"html_shots.py: {e}", file=sys.stderr)
        return 1
    finally:
        browser.close()
        shutil.rmtree(profile, ignore_errors=True)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
