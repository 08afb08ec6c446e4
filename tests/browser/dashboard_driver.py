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
        await self.command("Page.navigate", url=url)
        await self.wait_for(f"location.href === {json.dumps(url)} && document.readyState === 'complete'")

    async def click(self, selector: str) -> None:
        await self.wait_for(f"!!document.querySelector({json.dumps(selector)})")
        await self.evaluate(f"document.querySelector({json.dumps(selector)}).click()")

    async def fill(self, selector: str, value: str) -> None:
        await self.wait_for(f"!!document.querySelector({json.dumps(selector)})")
        await self.evaluate(f"(() => {{ const el = document.querySelector({json.dumps(selector)});"
                            f" el.value = {json.dumps(value)}; el.dispatchEvent(new Event('input', {{bubbles: true}})); }})()")

    async def press(self, key: str) -> None:
        """A key pressed and released where the focus is, as the keyboard sends it (Enter, Escape)."""
        codes = {"Enter": 13, "Escape": 27}
        down: dict[str, Any] = {"key": key, "code": key, "windowsVirtualKeyCode": codes[key]}
        if key == "Enter":
            down["text"] = "\r"
        await self.command("Input.dispatchKeyEvent", type="keyDown", **down)
        await self.command("Input.dispatchKeyEvent", type="keyUp", key=key, code=key, windowsVirtualKeyCode=codes[key])

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
