"""The chat page answers ``max_iterations_reached``: a turn at its limit waits for the user.

The agent may make one model call per turn (``max_iterations: 1``) and its first call asks for
a tool, so every turn reaches the limit after the tool ran; the page asks whether to continue
(10 more model calls: the scripted answer follows) or to stop (the server's note ends the turn).
"""

from __future__ import annotations

import pytest
import trio
from playwright.sync_api import Page, expect

from greenroom.testing import ScriptedAgent, Tool, open_greenroom
from tests.browser.axe import serious
from tests.browser.support import BrowserThread, open_page
from tests.slowness import slow

pytestmark = pytest.mark.slow
DEADLINE = slow(60)
STOP_NOTE = "Execution stopped after reaching the configured max_iterations limit (1)."


async def _lookup(ctx: object) -> str:
    return "found 3 files"


LIMITED = ScriptedAgent(
    turns=[
        [{"text": "Let me look."}, {"tool_call": {"name": "lookup", "arguments": {}}}],
        "Done after continuing.",
        [{"tool_call": {"name": "lookup", "arguments": {}, "id": "call_again"}}],
    ],
    tools=[Tool("lookup", _lookup)],
    max_iterations=1,
)


def turn_over(page: Page) -> None:
    expect(page.get_by_role("button", name="Cancel")).to_be_disabled()


def send(page: Page, text: str) -> None:
    page.get_by_label("Message", exact=True).fill(text)
    page.get_by_role("button", name="Send").click()


def continue_then_stop(page: Page, url: str) -> list[str]:
    open_page(page, url)
    page.get_by_role("button", name="New session").click()
    send(page, "look it up")
    log = page.get_by_role("log")
    dialog = page.get_by_role("dialog", name="Continue this turn?")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("1 model calls in this turn")
    notice = log.locator(".notice").last
    expect(notice).to_contain_text("waits for you to continue or stop")
    expect(log).not_to_contain_text("Stopped")  # it waits: nothing has stopped yet
    expect(log.locator(".tool-result")).to_have_text("found 3 files")
    expect(dialog.get_by_label("Reason (optional, sent when you reject)")).to_be_hidden()
    found = serious(page, "continuation dialog")
    focused = page.evaluate("document.activeElement.textContent")
    assert focused == "Continue this turn?", focused  # a stray Enter continues nothing
    page.keyboard.press("Enter")
    expect(dialog).to_be_visible()
    # Keyboard only: Tab reaches Stop, then Continue.
    page.keyboard.press("Tab")
    expect(dialog.get_by_role("button", name="Stop", exact=True)).to_be_focused()
    page.keyboard.press("Tab")
    expect(dialog.get_by_role("button", name="Continue (10 more)")).to_be_focused()
    page.keyboard.press("Enter")
    expect(dialog).to_be_hidden()
    expect(log).to_contain_text("Done after continuing.")
    turn_over(page)
    expect(log).not_to_contain_text(STOP_NOTE)

    # The next turn reaches the limit again: Stop ends it with the server's note.
    send(page, "look again")
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name="Stop", exact=True).click()
    expect(dialog).to_be_hidden()
    expect(log.locator(".message.assistant").last).to_contain_text(STOP_NOTE)
    turn_over(page)
    expect(log.locator(".tool-result")).to_have_count(2)
    # No model call after Stop (the script has no turn left: one would end in an error).
    expect(log.locator(".message.assistant")).to_have_count(3)
    expect(log.locator(".notice.error")).to_have_count(0)
    expect(page.get_by_label("Message", exact=True)).to_be_enabled()
    return found


async def test_continue_and_stop_at_max_iterations(browser: BrowserThread) -> None:
    with trio.fail_after(DEADLINE):
        async with open_greenroom(LIMITED) as gr:
            found = await browser.run(continue_then_stop, gr.url)
    assert found == []


def escape_stops(page: Page, url: str) -> None:
    open_page(page, url)
    page.get_by_role("button", name="New session").click()
    send(page, "look it up")
    dialog = page.get_by_role("dialog", name="Continue this turn?")
    expect(dialog).to_be_visible()
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(page.get_by_role("log")).to_contain_text(STOP_NOTE)
    turn_over(page)
    expect(page.get_by_role("button", name="Send")).to_be_focused()  # back where it was


async def test_escape_stops_the_turn(browser: BrowserThread) -> None:
    with trio.fail_after(DEADLINE):
        async with open_greenroom(LIMITED) as gr:
            await browser.run(escape_stops, gr.url)


def reload_while_waiting(page: Page, url: str) -> None:
    open_page(page, url)
    page.get_by_role("button", name="New session").click()
    send(page, "look it up")
    dialog = page.get_by_role("dialog", name="Continue this turn?")
    expect(dialog).to_be_visible()
    page.reload()  # the turn still waits on the server; the page finds the question in the log
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name="Continue (10 more)").click()
    expect(dialog).to_be_hidden()
    log = page.get_by_role("log")
    expect(log).to_contain_text("Done after continuing.")
    turn_over(page)


async def test_a_waiting_continuation_survives_a_reload(browser: BrowserThread) -> None:
    with trio.fail_after(DEADLINE):
        async with open_greenroom(LIMITED) as gr:
            await browser.run(reload_while_waiting, gr.url)
