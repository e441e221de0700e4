"""The chat page in Chromium against an in-process greenroom with scripted agents.

Each test runs its browser steps on the browser thread (``browser.run``) while the trio test
serves greenroom; steps that must act on the server meanwhile (dropping connections) call
back into trio with ``trio.from_thread``. Real clock: every wait is bounded (Playwright's
10 s default per step, ``trio.fail_after`` per test).
"""

from __future__ import annotations

import re

import pytest
import trio
from playwright.sync_api import Page, expect

from greenroom.testing import ScriptedAgent, Tool, ToolCallContext, open_greenroom
from tests.browser.support import ARTIFACTS, BrowserThread, open_page
from tests.slowness import slow

pytestmark = pytest.mark.slow
DEADLINE = slow(60)


def turn_over(page: Page) -> None:
    """Wait until the turn has ended: while one runs, Send steers it instead of starting one."""
    expect(page.get_by_role("button", name="Cancel")).to_be_disabled()


def new_session_and_send(page: Page, text: str) -> None:
    page.get_by_role("button", name="New session").click()
    expect(page.get_by_label("Message", exact=True)).to_be_focused()
    page.get_by_label("Message", exact=True).fill(text)
    page.get_by_role("button", name="Send").click()


# --- a turn ------------------------------------------------------------------------------------

REPLY = ScriptedAgent(
    turns=[[{"reasoning": "The user greets me."}, {"text": ["Hello", " from", " greenroom!"]}]],
    loop=True,
    title="Greetings",
)


def streaming_turn(page: Page, url: str) -> None:
    open_page(page, url)
    new_session_and_send(page, "hi there")
    log = page.get_by_role("log")
    expect(log).to_contain_text("Hello from greenroom!")
    expect(log.locator(".message.user")).to_have_text(re.compile("hi there"))
    expect(page.get_by_role("heading", level=2)).to_have_text("Greetings")
    expect(page.locator("#announcer")).to_have_text("Reply finished: Hello from greenroom!")
    reasoning = log.locator("details.reasoning")
    expect(reasoning).to_contain_text("Reasoning")
    reasoning.locator("summary").click()
    expect(reasoning).to_contain_text("The user greets me.")
    expect(page.locator("#usage")).to_contain_text("Tokens:")
    nav = page.get_by_role("navigation", name="Sessions")
    expect(nav.get_by_role("button", name=re.compile("Greetings"))).to_have_attribute(
        "aria-current", "page"
    )


async def test_new_session_and_a_streaming_turn(browser: BrowserThread) -> None:
    with trio.fail_after(DEADLINE):
        async with open_greenroom(REPLY) as gr:
            await browser.run(streaming_turn, gr.url)


# --- what it looks like ------------------------------------------------------------------------


def _look_up(ctx: ToolCallContext) -> str:
    return "Lisbon: 21 °C, sunny. Porto: 18 °C, cloudy."


SHOWCASE = ScriptedAgent(
    turns=[
        [
            {"reasoning": "I should check the weather before suggesting a city."},
            {"text": "Let me check the weather first."},
            {"tool_call": {"name": "weather", "arguments": {"cities": ["Lisbon", "Porto"]}}},
        ],
        [
            {"text": ["Lisbon looks best this weekend: ", "21 °C and sunny. "]},
            {"text": ["Porto is cooler ", "(18 °C) and cloudy."]},
            {"usage": {"input_tokens": 412, "output_tokens": 38}},
        ],
    ],
    tools=[Tool("weather", lambda ctx: _async(_look_up(ctx)), confirm=True)],
    loop=True,
    title="Weekend trip",
)


async def _async(value: str) -> str:
    await trio.lowlevel.checkpoint()
    return value


def screenshot(page: Page, url: str, path: str) -> None:
    open_page(page, url)
    new_session_and_send(page, "Lisbon or Porto this weekend?")
    dialog = page.get_by_role("dialog", name="Approve tool call?")
    dialog.get_by_role("button", name="Approve", exact=True).click()
    expect(page.get_by_role("log")).to_contain_text("Porto is cooler")
    expect(page.get_by_role("heading", level=2)).to_have_text("Weekend trip")
    page.get_by_role("log").locator("details.reasoning summary").first.click()
    page.screenshot(path=path, full_page=True)


@pytest.mark.parametrize("scheme", ["light", "dark"])
async def test_screenshot(browser: BrowserThread, scheme: str) -> None:
    """Saved as a test artifact in .artifacts/ (docs/chat-page.png is one of these)."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"chat-page-{scheme}.png"
    with trio.fail_after(DEADLINE):
        async with open_greenroom(SHOWCASE) as gr:
            await gr.client.create_session(title="Packing list")
            await browser.run(screenshot, gr.url, str(path), scheme=scheme)
    assert path.stat().st_size > 10_000


# --- approvals and questions -------------------------------------------------------------------

APPROVAL = ScriptedAgent(
    turns=[
        [{"text": "Let me look."}, {"tool_call": {"name": "shell", "arguments": {"cmd": "ls"}}}],
        "Done looking.",
    ],
    tools=[Tool("shell", lambda ctx: _async("a.txt b.txt"), confirm=True)],
    loop=True,
)


def approve_flow(page: Page, url: str) -> None:
    open_page(page, url)
    new_session_and_send(page, "list the files")
    dialog = page.get_by_role("dialog", name="Approve tool call?")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text('"cmd": "ls"')
    focused = page.evaluate("document.activeElement.textContent")
    assert focused == "Approve tool call?", focused  # a stray Enter approves nothing
    page.keyboard.press("Enter")
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name="Approve", exact=True).click()
    expect(dialog).to_be_hidden()
    log = page.get_by_role("log")
    expect(log.locator(".tool-result")).to_have_text("a.txt b.txt")
    expect(log).to_contain_text("Done looking.")


async def test_approval_dialog_approves(browser: BrowserThread) -> None:
    with trio.fail_after(DEADLINE):
        async with open_greenroom(APPROVAL) as gr:
            await browser.run(approve_flow, gr.url)


def escape_rejects(page: Page, url: str) -> None:
    open_page(page, url)
    new_session_and_send(page, "list the files")
    dialog = page.get_by_role("dialog", name="Approve tool call?")
    expect(dialog).to_be_visible()
    dialog.get_by_label("Reason (optional, sent when you reject)").fill("not now")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    result = page.get_by_role("log").locator(".tool-result")
    expect(result).to_have_text("The user rejected the tool call. Reason: not now")
    expect(page.get_by_role("button", name="Send")).to_be_focused()  # back where it was


async def test_escape_rejects_the_tool_call(browser: BrowserThread) -> None:
    with trio.fail_after(DEADLINE):
        async with open_greenroom(APPROVAL) as gr:
            await browser.run(escape_rejects, gr.url)


async def _ask_trip(ctx: ToolCallContext) -> str:
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "title": "City"},
            "nights": {"type": "integer", "title": "Nights", "minimum": 1},
            "pets": {"type": "boolean", "title": "Travelling with pets"},
            "budget": {"type": "string", "title": "Budget", "enum": ["low", "mid", "high"]},
        },
        "required": ["city"],
    }
    answer = await ctx.elicit("Where to, and for how long?", schema)
    return f"{answer.action}: {answer.content}"


ELICIT = ScriptedAgent(
    turns=[[{"tool_call": {"name": "ask_trip", "arguments": {}}}], "Noted."],
    tools=[Tool("ask_trip", _ask_trip)],
    loop=True,
)


def elicitation_form(page: Page, url: str) -> None:
    open_page(page, url)
    new_session_and_send(page, "plan a trip")
    dialog = page.get_by_role("dialog", name="The agent asks")
    expect(dialog).to_contain_text("Where to, and for how long?")
    dialog.get_by_label("City").fill("Lisbon")
    dialog.get_by_label("Nights").fill("3")
    dialog.get_by_label("Travelling with pets").check()
    dialog.get_by_label("Budget").select_option("mid")
    dialog.get_by_role("button", name="Submit").click()
    expect(dialog).to_be_hidden()
    result = page.get_by_role("log").locator(".tool-result")
    expected = "accept: {'city': 'Lisbon', 'nights': 3, 'pets': True, 'budget': 'mid'}"
    expect(result).to_have_text(expected)
    turn_over(page)
    # Escape cancels the next question.
    page.get_by_label("Message", exact=True).fill("again")
    page.get_by_role("button", name="Send").click()
    expect(dialog).to_be_visible()
    page.keyboard.press("Escape")
    expect(page.get_by_role("log").locator(".tool-result").last).to_have_text("cancel: None")


async def test_elicitation_form(browser: BrowserThread) -> None:
    with trio.fail_after(DEADLINE):
        async with open_greenroom(ELICIT) as gr:
            await browser.run(elicitation_form, gr.url)


# --- sessions ----------------------------------------------------------------------------------


def fork_flow(page: Page, url: str) -> None:
    open_page(page, url)
    new_session_and_send(page, "first question")
    log = page.get_by_role("log")
    expect(log.locator(".message.assistant")).to_have_count(1)
    turn_over(page)
    page.get_by_label("Message", exact=True).fill("second question")
    page.get_by_role("button", name="Send").click()
    expect(log.locator(".message.assistant")).to_have_count(2)
    page.get_by_role("button", name="Fork from here (your message 2)").click()
    expect(page.get_by_role("heading", level=2)).to_have_text("Greetings (fork 1)")
    expect(log.locator(".message.user")).to_have_count(1)
    expect(page.get_by_label("Message", exact=True)).to_have_value("second question")
    nav = page.get_by_role("navigation", name="Sessions")
    expect(nav.get_by_role("listitem")).to_have_count(2)
    # rename, star, search, delete
    page.get_by_role("button", name="Rename").click()
    page.get_by_role("dialog", name="Rename session").get_by_label("Title").fill("Side quest")
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", level=2)).to_have_text("Side quest")
    page.get_by_role("button", name="Star").click()
    expect(page.get_by_role("button", name="Star")).to_have_attribute("aria-pressed", "true")
    expect(nav.get_by_role("button", name=re.compile("★ Side quest"))).to_be_visible()
    page.get_by_label("Search sessions").fill("greet")
    expect(nav.get_by_role("listitem")).to_have_count(1)
    page.get_by_label("Search sessions").fill("")
    page.get_by_role("button", name="Delete").click()
    page.get_by_role("dialog", name="Delete this session?").get_by_role(
        "button", name="Delete"
    ).click()
    expect(nav.get_by_role("listitem")).to_have_count(1)
    expect(page.locator("#empty-hint")).to_have_text("The session was deleted.")


async def test_fork_rename_star_search_delete(browser: BrowserThread) -> None:
    with trio.fail_after(DEADLINE):
        async with open_greenroom(REPLY) as gr:
            await browser.run(fork_flow, gr.url)


# --- connections ---------------------------------------------------------------------------------

SLOW = ScriptedAgent(
    turns=[[{"text": f" {n}"} if n % 2 else {"delay": 0.15} for n in range(1, 21)]],
    loop=True,
)
COUNTED = "".join(f" {n}" for n in range(1, 21, 2))


def reconnect_flow(page: Page, url: str, drop: object) -> None:
    open_page(page, url)
    page.evaluate(
        """() => {
            window.states = [];
            new MutationObserver(() => window.states.push(
                document.getElementById("connection").textContent)
            ).observe(document.getElementById("connection"), {childList: true});
        }"""
    )
    new_session_and_send(page, "count")
    text = page.get_by_role("log").locator(".message.assistant .text")
    expect(text).to_contain_text(" 3")
    assert callable(drop)
    assert drop() >= 1  # the page's WebSocket, cut by the server
    expect(page.locator("#connection")).to_have_text("live")
    expect(text).to_have_text(COUNTED)  # every token once, none lost
    states = page.evaluate("window.states")
    assert states[:2] == ["reconnecting…", "live"], states


async def test_reconnect_after_a_server_side_drop(browser: BrowserThread) -> None:
    with trio.fail_after(DEADLINE):
        async with open_greenroom(SLOW) as gr:
            token = trio.lowlevel.current_trio_token()

            def drop() -> int:
                return trio.from_thread.run_sync(gr.drop_connections, trio_token=token)

            await browser.run(reconnect_flow, gr.url, drop)


def reload_flow(page: Page, url: str) -> None:
    open_page(page, url)
    new_session_and_send(page, "count")
    text = page.get_by_role("log").locator(".message.assistant .text")
    expect(text).to_contain_text(" 3")
    page.reload()
    expect(page.locator("#connection")).to_have_text("live")
    expect(page.get_by_role("log").locator(".message.user")).to_have_text(re.compile("count"))
    expect(text).to_have_text(COUNTED)  # the turn ran on through the reload
    expect(page.get_by_role("button", name="Cancel")).to_be_disabled()


async def test_a_turn_survives_a_reload(browser: BrowserThread) -> None:
    with trio.fail_after(DEADLINE):
        async with open_greenroom(SLOW) as gr:
            await browser.run(reload_flow, gr.url)


def cancel_flow(page: Page, url: str) -> None:
    open_page(page, url)
    new_session_and_send(page, "count")
    text = page.get_by_role("log").locator(".message.assistant .text")
    expect(text).to_contain_text(" 3")
    page.get_by_role("button", name="Cancel").click()
    expect(page.get_by_role("log")).to_contain_text("The turn was cancelled.")
    expect(page.get_by_role("button", name="Cancel")).to_be_disabled()


LONG = ScriptedAgent(  # about 30 s unless cancelled
    turns=[[{"text": f" {n}"} if n % 2 else {"delay": 0.3} for n in range(1, 201)]],
)


async def test_cancel_stops_the_turn(browser: BrowserThread) -> None:
    with trio.fail_after(DEADLINE):
        async with open_greenroom(LONG) as gr:
            await browser.run(cancel_flow, gr.url)


def token_flow(page: Page, url: str) -> None:
    page.goto(url)
    dialog = page.get_by_role("dialog", name="This server needs an access token")
    dialog.get_by_label("Access token").fill("wrong")
    page.keyboard.press("Enter")
    dialog = page.get_by_role("dialog", name="The access token was not accepted.")
    dialog.get_by_label("Access token").fill("s3cret")
    page.keyboard.press("Enter")
    expect(page.locator("#connection")).to_have_text("live")  # bearer.<token> subprotocol
    new_session_and_send(page, "hi")
    expect(page.get_by_role("log")).to_contain_text("Hello from greenroom!")
    stored = page.evaluate("sessionStorage.getItem('greenroom.token')")
    assert stored == "s3cret"


async def test_token_prompt(browser: BrowserThread) -> None:
    with trio.fail_after(DEADLINE):
        async with open_greenroom(REPLY, auth_token="s3cret") as gr:
            await browser.run(token_flow, gr.url)


# --- keyboard and accessibility ------------------------------------------------------------------


def keyboard_flow(page: Page, url: str) -> None:
    open_page(page, url)
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to the message box")).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="New session")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_label("Message", exact=True)).to_be_focused()
    page.keyboard.type("line one")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type("line two")
    page.keyboard.press("Enter")
    log = page.get_by_role("log")
    expect(log.locator(".message.user .text")).to_have_text("line one\nline two")
    dialog = page.get_by_role("dialog", name="Approve tool call?")
    expect(dialog).to_be_visible()
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")  # past the reason field and Reject, onto Approve
    page.keyboard.press("Tab")
    expect(dialog.get_by_role("button", name="Approve", exact=True)).to_be_focused()
    page.keyboard.press("Enter")
    expect(log).to_contain_text("Done looking.")


async def test_keyboard_only(browser: BrowserThread) -> None:
    with trio.fail_after(DEADLINE):
        async with open_greenroom(APPROVAL) as gr:
            await browser.run(keyboard_flow, gr.url)


def gap_flow(page: Page, url: str, drop_and_flood: object) -> None:
    open_page(page, url)
    new_session_and_send(page, "hi there")
    log = page.get_by_role("log")
    expect(log).to_contain_text("Hello from greenroom!")
    assert callable(drop_and_flood)
    drop_and_flood()  # meanwhile what the page missed is out of the ring and the store
    expect(page.locator("#connection")).to_have_text("live")
    turn_over(page)
    page.get_by_label("Message", exact=True).fill("again")
    page.get_by_role("button", name="Send").click()
    expect(log.locator(".message.assistant")).to_have_count(2)
    # The page re-snapshotted on the gap instead of replaying the buffer: no flood in sight.
    expect(log).not_to_contain_text("flood")
    expect(log.locator(".message.user")).to_have_count(2)


async def test_gap_makes_the_page_resnapshot(browser: BrowserThread) -> None:
    import time

    from greenroom.actors import RegistryConfig
    from greenroom.domain import AgentChoice
    from greenroom.persistence import RetentionPolicy

    with trio.fail_after(DEADLINE):
        config = RegistryConfig(log_capacity=8)
        async with open_greenroom(REPLY, registry_config=config) as gr:
            token = trio.lowlevel.current_trio_token()

            async def flood() -> None:
                gr.drop_connections()
                for sid in gr.registry.live_ids():
                    for n in range(20):
                        gr.registry.append_event(sid, AgentChoice(f"flood {n} "))
                # Retention removes those deltas from the store (the ring keeps the last 8):
                # the page's resume point is older than what is kept, so it gets a gap.
                policy = RetentionPolicy(max_age=0.0, max_deltas_per_session=None)
                await gr.registry.persistence.writer.apply_retention(policy, time.time() + 1)

            def drop_and_flood() -> None:
                trio.from_thread.run(flood, trio_token=token)

            await browser.run(gap_flow, gr.url, drop_and_flood)


STEERED = ScriptedAgent(
    turns=[
        [{"text": "working"}, {"delay": 2.0}],  # time to steer and queue
        "took the steer",
        "did the follow-up",
    ],
    loop=True,
)


def steer_flow(page: Page, url: str) -> None:
    open_page(page, url)
    new_session_and_send(page, "start")
    log = page.get_by_role("log")
    expect(log).to_contain_text("working")
    expect(page.get_by_role("button", name="Queue")).to_be_enabled()
    page.get_by_label("Message", exact=True).fill("go left")
    page.get_by_role("button", name="Send").click()  # a turn runs: this steers it
    page.get_by_label("Message", exact=True).fill("then summarise")
    page.get_by_role("button", name="Queue").click()
    expect(log).to_contain_text("did the follow-up")
    users = log.locator(".message.user .text")
    expect(users).to_have_text(["start", "go left", "then summarise"])
    expect(page.get_by_role("button", name="Queue")).to_be_disabled()


async def test_steer_and_follow_up(browser: BrowserThread) -> None:
    with trio.fail_after(DEADLINE):
        async with open_greenroom(STEERED) as gr:
            await browser.run(steer_flow, gr.url)


def picker_flow(page: Page, url: str) -> None:
    open_page(page, url)
    agent = page.get_by_label("Agent", exact=True)
    expect(agent).to_be_hidden()  # no session, no composer
    page.get_by_role("button", name="New session").click()
    expect(agent.locator("option")).to_have_count(2)
    expect(agent).to_have_value("default")
    agent.select_option("other")
    page.get_by_label("Message", exact=True).fill("hi")
    page.get_by_role("button", name="Send").click()
    expect(page.get_by_role("log")).to_contain_text("from the other agent")
    expect(agent).to_be_disabled()  # the session runs "other" now (decision 0019)
    expect(agent).to_have_value("other")
    model = page.get_by_label("Model", exact=True)
    expect(model.locator("option", has_text="titles")).to_have_count(1)  # after the first turn


async def test_agent_and_model_pickers(browser: BrowserThread) -> None:
    other = ScriptedAgent(turns=["from the other agent"], loop=True)
    with trio.fail_after(DEADLINE):
        async with open_greenroom(REPLY, agents={"other": other}) as gr:
            await browser.run(picker_flow, gr.url)


def reload_while_asked(page: Page, url: str) -> None:
    open_page(page, url)
    new_session_and_send(page, "list the files")
    dialog = page.get_by_role("dialog", name="Approve tool call?")
    expect(dialog).to_be_visible()
    page.reload()  # the turn waits on the server; the page finds the question in the log
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text('"cmd": "ls"')
    log = page.get_by_role("log")
    expect(log.locator(".message.assistant").first).to_contain_text("Let me look.")
    dialog.get_by_role("button", name="Approve", exact=True).click()
    expect(log).to_contain_text("Done looking.")
    expect(log.locator(".message.assistant")).to_have_count(2)  # nothing shown twice


async def test_a_pending_approval_survives_a_reload(browser: BrowserThread) -> None:
    with trio.fail_after(DEADLINE):
        async with open_greenroom(APPROVAL) as gr:
            await browser.run(reload_while_asked, gr.url)


TWO_CALLS = ScriptedAgent(
    turns=[
        [{"tool_call": {"name": "shell", "arguments": {"cmd": "ls"}}}],
        [{"tool_call": {"name": "shell", "arguments": {"cmd": "pwd"}}}],
        "Both ran.",
    ],
    tools=[Tool("shell", lambda ctx: _async(f"ran {ctx.arguments['cmd']}"), confirm=True)],
)


def timed_grant(page: Page, url: str) -> None:
    open_page(page, url)
    new_session_and_send(page, "two commands")
    dialog = page.get_by_role("dialog", name="Approve tool call?")
    dialog.get_by_role("button", name="Allow shell for 10 minutes").click()
    log = page.get_by_role("log")
    expect(log).to_contain_text("Both ran.")  # the second call did not ask
    expect(log.locator(".tool-result")).to_have_text(["ran ls", "ran pwd"])


async def test_a_timed_grant_covers_the_next_call(browser: BrowserThread) -> None:
    with trio.fail_after(DEADLINE):
        async with open_greenroom(TWO_CALLS) as gr:
            await browser.run(timed_grant, gr.url)
            [session] = await gr.client.sessions()
            stored = await gr.store.get_session(session["id"])
    [grant] = stored.approvals  # one decision: the second call was covered by the grant
    assert (grant.decision, grant.grant) == ("approve-tool", "shell")
    assert grant.expires_at is not None
    assert 590 < (grant.expires_at - grant.decided_at).total_seconds() <= 600


def restarted_log(page: Page, url: str, drop: object) -> None:
    open_page(page, url)
    new_session_and_send(page, "hi there")
    log = page.get_by_role("log")
    expect(log.locator(".message.assistant")).to_have_count(1)
    assert callable(drop)
    page.context.set_offline(True)
    drop()  # and, while the page cannot reconnect, the idle session's actor and log go away
    page.context.set_offline(False)
    expect(page.locator("#connection")).to_have_text("live")
    turn_over(page)
    page.get_by_label("Message", exact=True).fill("again")
    page.get_by_role("button", name="Send").click()
    expect(log.locator(".message.assistant")).to_have_count(2)  # the new log's events count
    expect(log.locator(".message.assistant").last).to_contain_text("Hello from greenroom!")


async def test_a_restarted_log_is_followed(browser: BrowserThread) -> None:
    from greenroom.actors import RegistryConfig

    with trio.fail_after(DEADLINE):
        config = RegistryConfig(idle_timeout=0.5)
        async with open_greenroom(REPLY, registry_config=config) as gr:
            token = trio.lowlevel.current_trio_token()

            async def drop_until_retired() -> None:
                gr.drop_connections()
                for _ in range(round(slow(200))):
                    if not gr.registry.live_ids():
                        return
                    await trio.sleep(0.05)  # real clock: the idle timeout runs out
                raise AssertionError("the idle session did not retire within 10 s")

            def drop() -> None:
                trio.from_thread.run(drop_until_retired, trio_token=token)

            await browser.run(restarted_log, gr.url, drop)


def refused_run(page: Page, url: str) -> None:
    open_page(page, url)
    new_session_and_send(page, "first")
    log = page.get_by_role("log")
    expect(log.locator(".message.assistant")).to_have_count(1)
    turn_over(page)
    # A model the server does not know (a picker gone stale): the server refuses the turn.
    page.evaluate(
        """() => {
            const picker = document.getElementById("model-picker");
            picker.append(new Option("gone", "nosuch/model-that-is-not-there"));
            picker.value = "nosuch/model-that-is-not-there";
            picker.dispatchEvent(new Event("change"));
        }"""
    )
    page.get_by_label("Message", exact=True).fill("hello?")
    page.get_by_role("button", name="Send").click()
    expect(log.locator(".notice.error")).to_contain_text("Could not do that:")
    expect(log.locator(".message.user")).to_have_count(1)  # the refused one was taken back
    expect(page.get_by_label("Message", exact=True)).to_have_value("hello?")  # kept to retry


async def test_a_refused_run_takes_its_message_back(browser: BrowserThread) -> None:
    with trio.fail_after(DEADLINE):
        async with open_greenroom(REPLY) as gr:
            await browser.run(refused_run, gr.url)
