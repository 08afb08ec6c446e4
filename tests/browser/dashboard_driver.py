"""Headless Chromium driving the dashboard: DevTools events kept (page errors, failed requests),
waits that survive navigations, clicks by CSS selector, screenshots."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pyvips

from tests.browser.headless_chromium import DevToolsError, HeadlessChromium

WAIT_S = 30.0  # upper bound for the page to reach a state (never asserted as a duration)
VIEWPORT = {"width": 1360, "height": 860}
PHONE = {"width": 390, "height": 844}  # a phone held upright, in CSS pixels

# What reaches past the viewport's sides where nobody can see it: an element wider than the screen is fine only inside
# a box that scrolls (or clips) sideways, e.g. a .table-wrap. The outermost such element is named, with its text.
CUT_OFF = """(() => {
  const width = document.documentElement.clientWidth;
  const clips = (el) => ['auto', 'scroll', 'hidden', 'clip'].includes(getComputedStyle(el).overflowX);
  const out = (el) => { const r = el.getBoundingClientRect();
                        return r.width > 0 && r.height > 0 && (r.right > width + 0.5 || r.left < -0.5); };
  const found = [];
  for (const el of document.body.querySelectorAll('*')) {
    if (!out(el) || (el.parentElement !== document.body && out(el.parentElement))) continue;
    let up = el.parentElement;
    while (up && up !== document.body && !clips(up)) up = up.parentElement;
    if (up && up !== document.body) continue;
    const r = el.getBoundingClientRect();
    found.push(`${el.tagName.toLowerCase()}${el.id ? '#' + el.id : ''}${el.classList.length ? '.' + [...el.classList].join('.') : ''}`
               + ` [${Math.round(r.left)}, ${Math.round(r.right)}] ${JSON.stringify((el.textContent || '').trim().slice(0, 40))}`);
  }
  if (document.documentElement.scrollWidth > width) found.push(`the page scrolls sideways: ${document.documentElement.scrollWidth} px wide`);
  return found;
})()"""


class DashboardBrowser(HeadlessChromium):
    """One page; JavaScript exceptions and console errors are collected in ``problems``."""

    def __init__(self, binary: str, profile_dir: Path) -> None:
        super().__init__(binary, profile_dir)
        self.problems: list[str] = []
        self.dialogs: list[str] = []  # JavaScript dialogs opened and not yet answered (alert, beforeunload, ...)

    async def open(self, url: str, start_timeout: float = 30) -> None:
        await super().open(url, start_timeout)
        await self.command("Runtime.enable")
        await self.command("Page.enable")
        await self.command("Emulation.setDeviceMetricsOverride", deviceScaleFactor=1, mobile=False, **VIEWPORT)

    def _event(self, event: dict[str, Any]) -> None:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            text = details.get("exception", {}).get("description") or details.get("text", "")
            self.problems.append(f"exception: {text}")
        elif method == "Page.javascriptDialogOpening":
            self.dialogs.append(params.get("type", ""))
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.problems.append("console.error: " + " ".join(str(a.get("value", a.get("description", "")))
                                                               for a in params.get("args", [])))

    async def as_phone(self, width: int = PHONE["width"]) -> None:
        """The page from now on as a phone shows it (PHONE, or a phone of another width; a touch screen)."""
        await self.command("Emulation.setDeviceMetricsOverride", deviceScaleFactor=1, mobile=True,
                           width=width, height=PHONE["height"])

    async def cut_off(self) -> list[str]:
        """What of the page reaches past the viewport's sides and cannot be scrolled to there (CUT_OFF); [] when all fits."""
        return list(await self.evaluate(CUT_OFF))

    async def js(self, expression: str) -> Any:
        return await self.evaluate(expression)

    async def wait_for(self, expression: str, within: float = WAIT_S) -> None:
        """Poll until ``expression`` is truthy; a page being replaced mid-poll is retried."""
        try:
            async with asyncio.timeout(within):
                while True:
                    try:
                        if await self.evaluate(expression):
                            return
                    except DevToolsError:
                        pass
                    await asyncio.sleep(0.05)
        except TimeoutError:
            raise AssertionError(f"the page never reached: {expression}\nproblems: {self.problems}\n"
                                 f"text: {await self._body_text()}") from None

    async def _body_text(self) -> str:
        try:
            return str(await self.evaluate("document.body ? document.body.innerText.slice(0, 1500) : ''"))
        except DevToolsError as exc:
            return f"({exc})"

    async def goto(self, url: str) -> None:
        """Open ``url``; returns once its document is loaded and, for another dashboard view, once the shell has begun
        to show it (the view shown before is gone). Not once the address reads ``url``: a view may rewrite it as soon
        as it opens (Analytics' zone=gone -> zone=all, Files' first zone), often before a look at it; the caller then
        waits for what it reads. A view change the page holds back (unsaved work) is never shown: there use location.hash."""
        document = url.split("#", 1)[0]
        # A marker in the view shown: the shell clears the view (and the marker) when it shows the next one, and a new
        # document has none. The address asked for being already the page's, nothing changes, and nothing is marked.
        await self.evaluate(f"""(() => {{ const view = document.getElementById('view');
            if (!view || location.href === {json.dumps(url)}) return;
            const mark = document.createElement('template'); mark.setAttribute('data-goto-left', ''); view.append(mark); }})()""")
        await self.command("Page.navigate", url=url)
        await self.wait_for(f"location.href.split('#', 1)[0] === {json.dumps(document)}"
                            " && document.readyState === 'complete' && !document.querySelector('[data-goto-left]')")

    async def click(self, selector: str) -> None:
        await self.wait_for(f"!!document.querySelector({json.dumps(selector)})")
        await self.evaluate(f"document.querySelector({json.dumps(selector)}).click()")

    async def fill(self, selector: str, value: str) -> None:
        await self.wait_for(f"!!document.querySelector({json.dumps(selector)})")
        await self.evaluate(f"(() => {{ const el = document.querySelector({json.dumps(selector)});"
                            f" el.value = {json.dumps(value)}; el.dispatchEvent(new Event('input', {{bubbles: true}})); }})()")

    async def press(self, key: str) -> None:
        """A key pressed and released where the focus is, as the keyboard sends it (Enter, Escape, Tab, Space)."""
        codes = {"Enter": 13, "Escape": 27, "Tab": 9, " ": 32, "ArrowLeft": 37, "ArrowRight": 39, "Home": 36, "End": 35}
        down: dict[str, Any] = {"key": key, "code": key, "windowsVirtualKeyCode": codes[key]}
        if key == "Enter":
            down["text"] = "\r"
        elif key == " ":
            down.update(code="Space", text=" ")
        await self.command("Input.dispatchKeyEvent", type="keyDown", **down)
        await self.command("Input.dispatchKeyEvent", type="keyUp", key=key, code=down["code"], windowsVirtualKeyCode=codes[key])

    async def tap(self, x: float, y: float) -> None:
        """A finger's tap at (x, y) in CSS pixels of the viewport, as a touch screen sends it (no hover before it)."""
        await self.command("Emulation.setTouchEmulationEnabled", enabled=True, maxTouchPoints=1)
        await self.command("Input.synthesizeTapGesture", x=x, y=y, gestureSourceType="touch")

    async def type_text(self, text: str) -> None:
        """Text typed where the focus is (Input.insertText: what a keyboard's characters would enter)."""
        await self.command("Input.insertText", text=text)

    async def answer_dialog(self, *, accept: bool, within: float = WAIT_S) -> str:
        """Wait for a JavaScript dialog (the browser's own, e.g. beforeunload's) and answer it; returns its type. The
        page runs no script while one is open, so the wait asks with a command that runs none."""
        try:
            async with asyncio.timeout(within):
                while not self.dialogs:
                    await self.command("Page.getNavigationHistory")
                    await asyncio.sleep(0.05)
        except TimeoutError:
            raise AssertionError("no JavaScript dialog opened") from None
        await self.command("Page.handleJavaScriptDialog", accept=accept)
        return self.dialogs.pop(0)

    async def text(self, selector: str) -> str:
        return str(await self.evaluate(f"document.querySelector({json.dumps(selector)})?.textContent ?? ''"))

    async def screenshot(self, path: Path, *, full_page: bool = False) -> None:
        """A PNG of the viewport, or of the whole page (up to 2400 px high) by growing the viewport.
        Notifications are dismissed first: they belong to the step before, not to the view."""
        await self.evaluate("document.getElementById('toasts')?.replaceChildren()")
        if full_page:
            height = min(int(await self.evaluate("document.documentElement.scrollHeight")), 2400)
            await self.command("Emulation.setDeviceMetricsOverride", deviceScaleFactor=1, mobile=False,
                               width=VIEWPORT["width"], height=max(height, VIEWPORT["height"]))
            await self.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        try:
            shot = await self.command("Page.captureScreenshot", format="png")
        finally:
            if full_page:
                await self.command("Emulation.setDeviceMetricsOverride", deviceScaleFactor=1, mobile=False, **VIEWPORT)
        save_png(base64.b64decode(shot["data"]), path)

def save_png(raw: bytes, path: Path) -> None:
    """The screenshot reduced to a 256-colour palette, so that the committed PNGs stay small."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pyvips.Image.new_from_buffer(raw, "").pngsave(str(path), palette=True, compression=9, dither=0)
