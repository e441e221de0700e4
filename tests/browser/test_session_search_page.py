"""The chat page's session list over the search endpoint (decision 0026): the search box finds
a session by the text of its messages (debounced, on the server), "More sessions" adds the next
page of a long list, and axe finds nothing serious in the list with either."""

from __future__ import annotations

import trio
from playwright.sync_api import Page, expect

from greenroom.domain import ChatMessage, Message, Session
from greenroom.testing import ScriptedAgent, open_greenroom
from tests.browser.axe import serious
from tests.browser.support import BrowserThread, open_page
from tests.slowness import slow

DEADLINE = slow(90)
AGENT = ScriptedAgent(turns=[[{"text": "hi"}]], loop=True)
SESSIONS = 57  # more than a page (50)


def search_flow(page: Page, url: str) -> list[str]:
    open_page(page, url)
    nav = page.get_by_role("navigation", name="Sessions")
    items = nav.get_by_role("listitem")
    expect(items).to_have_count(51)  # a page and the "More sessions" item
    more = nav.get_by_role("button", name="More sessions")
    expect(more).to_be_visible()
    found = serious(page, "session list with more")
    more.click()
    expect(items).to_have_count(SESSIONS)
    expect(more).to_have_count(0)
    expect(nav.get_by_role("button", name="Session 0", exact=False).first).to_be_visible()
    page.get_by_label("Search sessions").fill("zebracorn")
    expect(items).to_have_count(1)
    expect(items.first).to_contain_text("Session 17")
    found += serious(page, "session list searched")
    page.get_by_label("Search sessions").fill("no such words anywhere")
    expect(items).to_have_text(["No session matches."])
    page.get_by_label("Search sessions").fill("")
    expect(items).to_have_count(51)
    return found


async def test_search_box_and_more_sessions(browser: BrowserThread) -> None:
    with trio.fail_after(DEADLINE):
        async with open_greenroom(AGENT) as gr:
            for n in range(SESSIONS):
                text = "I saw a zebracorn" if n == 17 else f"plain text {n}"
                items = (Message(ChatMessage(role="user", content=text)),)
                await gr.store.add_session(Session.new(title=f"Session {n}", items=items))
            found = await browser.run(search_flow, gr.url)
    assert found == []
