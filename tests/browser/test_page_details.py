"""The page's smaller surprises of issue 22, each fixed and pinned in Chromium: Star on and off
look different, no ``GET .../models`` 404 for a new session, "1 message", the agent's
``welcome_message``, a readable error when the server is down, and cost and context use shown
when a ``token_usage`` event carries them (hidden when null or 0)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import trio
from playwright.sync_api import Page, Route, expect

from greenroom.domain import Message, Session, TokenUsage, TokenUsageInfo
from greenroom.testing import ScriptedAgent, open_greenroom
from tests.browser.support import BrowserThread, open_page

pytestmark = pytest.mark.slow
DEADLINE = 60
REPLY = ScriptedAgent(turns=["Hello."], loop=True, title="Hi")


def star_and_models(page: Page, url: str) -> None:
    asked: list[tuple[str, int]] = []
    page.on(
        "response",
        lambda r: asked.append((r.url, r.status)) if "/models" in r.url else None,
    )
    open_page(page, url)
    page.get_by_role("button", name="New session").click()
    star = page.get_by_role("button", name="Star")
    expect(star).to_have_attribute("aria-pressed", "false")
    off = star.evaluate("b => [b.textContent, getComputedStyle(b).backgroundColor]")
    star.click()
    expect(star).to_have_attribute("aria-pressed", "true")
    on = star.evaluate("b => [b.textContent, getComputedStyle(b).backgroundColor]")
    assert on[0] != off[0] and on[1] != off[1], (off, on)  # glyph and colour both change
    assert "★" in on[0] and "☆" in off[0]
    # A new session has no runtime: the page does not ask for its model picker (no 404).
    assert asked == []
    page.get_by_label("Message", exact=True).fill("hi")
    page.get_by_role("button", name="Send").click()
    expect(page.get_by_role("log")).to_contain_text("Hello.")
    expect(page.get_by_role("button", name="Cancel")).to_be_disabled()
    expect(page.get_by_label("Model", exact=True).locator("option")).not_to_have_count(1)
    assert asked and all(status == 200 for _, status in asked), asked


async def test_star_looks_different_and_no_models_404(browser: BrowserThread) -> None:
    with trio.fail_after(DEADLINE):
        async with open_greenroom(REPLY) as gr:
            await browser.run(star_and_models, gr.url)


def one_message(page: Page, url: str) -> None:
    open_page(page, url)
    nav = page.get_by_role("navigation", name="Sessions")
    expect(nav.get_by_role("button", name=re.compile("One note"))).to_contain_text("· 1 message")
    expect(nav.get_by_role("button", name=re.compile("One note"))).not_to_contain_text("messages")
    expect(nav.get_by_role("button", name=re.compile("Empty"))).to_contain_text("· 0 messages")


async def test_one_message_is_singular(browser: BrowserThread) -> None:
    with trio.fail_after(DEADLINE):
        async with open_greenroom(REPLY) as gr:
            await gr.store.add_session(Session.new(title="One note", items=(Message.user("x"),)))
            await gr.client.create_session(title="Empty")
            await browser.run(one_message, gr.url)


def welcome(page: Page, url: str) -> None:
    def with_welcome(route: Route) -> None:
        # The listing gains welcome_message with the agent runtime IV issue: the page reads it
        # when present. Here it is added to the real answer.
        response = route.fetch()
        listed: list[dict[str, Any]] = response.json()
        for entry in listed:
            if entry["name"] == "default":
                entry["welcome_message"] = "Welcome! Ask me about trains."
        route.fulfill(response=response, body=json.dumps(listed))

    page.route(re.compile(r".*/api/agents$"), with_welcome)
    open_page(page, url)
    expect(page.locator("#welcome")).to_be_hidden()
    page.get_by_role("button", name="New session").click()
    expect(page.locator("#welcome")).to_have_text("Welcome! Ask me about trains.")
    page.get_by_label("Agent", exact=True).select_option("other")  # no welcome message
    expect(page.locator("#welcome")).to_be_hidden()
    page.get_by_label("Agent", exact=True).select_option("default")
    expect(page.locator("#welcome")).to_be_visible()
    page.get_by_label("Message", exact=True).fill("hi")
    page.get_by_role("button", name="Send").click()
    expect(page.locator("#welcome")).to_be_hidden()  # the conversation has begun


async def test_the_welcome_message_is_shown(browser: BrowserThread) -> None:
    other = ScriptedAgent(turns=["other"], loop=True)
    with trio.fail_after(DEADLINE):
        async with open_greenroom(REPLY, agents={"other": other}) as gr:
            await browser.run(welcome, gr.url)


def server_down(page: Page, url: str) -> None:
    open_page(page, url)
    page.context.set_offline(True)
    page.get_by_role("button", name="New session").click()
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("the greenroom server cannot be reached")
    expect(alert).not_to_contain_text("Failed to fetch")
    page.context.set_offline(False)


async def test_a_server_that_cannot_be_reached_is_said_so(browser: BrowserThread) -> None:
    with trio.fail_after(DEADLINE):
        async with open_greenroom(REPLY) as gr:
            await browser.run(server_down, gr.url)


def usage_shown(page: Page, url: str, sid: str, emit: Any) -> None:
    open_page(page, f"{url}/#{sid}")
    usage = page.locator("#usage")
    expect(usage).to_have_text("Tokens: 0 in, 0 out")
    emit(TokenUsageInfo(1200, 80, context_length=32_000, context_limit=128_000, cost=0.0123))
    expect(usage).to_have_text(
        "Tokens: 1,200 in, 80 out · cost $0.0123 · context 32,000 / 128,000 (25%)"
    )
    unknown: Any = None  # the price is unknown (the agent runtime IV issue sends null)
    emit(TokenUsageInfo(1300, 90, context_length=0, context_limit=0, cost=unknown))
    expect(usage).to_have_text("Tokens: 1,300 in, 90 out")
    emit(TokenUsageInfo(1400, 95, cost=0.0))
    expect(usage).to_have_text("Tokens: 1,400 in, 95 out")


async def test_cost_and_context_when_known(browser: BrowserThread) -> None:
    with trio.fail_after(DEADLINE):
        async with open_greenroom(REPLY) as gr:
            sid = (await gr.client.create_session(title="Usage"))["id"]
            token = trio.lowlevel.current_trio_token()

            def emit(info: TokenUsageInfo) -> None:
                event = TokenUsage(info, session_id=sid, agent_name="root")
                trio.from_thread.run_sync(gr.registry.append_event, sid, event, trio_token=token)

            await browser.run(usage_shown, gr.url, sid, emit)
