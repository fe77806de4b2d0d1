"""The chat page in a real browser: Debian's chromium and chromium-driver, headless, driven by selenium (as the viz
page's browser tests are). A tiny model is served on a free port; the page sends a message, the answer streams in
and is rendered as markdown, a second turn keeps the first. Screenshots go to LLM_ARTIFACTS (default
build/test-artifacts). Outside CI skipped, saying why, when selenium, chromium or its driver is missing; in CI (CI
set, as .ci/run does, which installs them) a missing one fails the test.

Hooks the page keeps for tests like these: body[data-state] is "busy" while an answer streams and "idle" after;
messages are .msg elements (class user or assistant, data-testid="message"); window.chat.send(text) sends a
message as the form does; #input, #send, #chat and #model are stable ids."""
from __future__ import annotations

import os
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from browser import CHROME_MISSING, IN_CI, headless_chrome  # noqa: E402
if not IN_CI:
  pytest.importorskip("selenium", reason="selenium is not installed (it comes with the test extra: pip install '.[test]')")
  pytest.importorskip("tokenizers")
  pytest.importorskip("transformers")
MISSING = CHROME_MISSING
pytestmark = pytest.mark.skipif(bool(MISSING) and not IN_CI, reason=MISSING + " (.ci/run installs them)")

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402

from llm_models import write_tiny_chat  # noqa: E402

from tinyhybrid.llm.runner import LLM  # noqa: E402
from tinyhybrid.llm.serve import LLMServer  # noqa: E402

ARTIFACTS = os.getenv("LLM_ARTIFACTS") or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "test-artifacts")


@pytest.fixture(scope="module")
def url(tmp_path_factory):
  path = write_tiny_chat(tmp_path_factory.mktemp("page") / "chat.gguf", 256)
  srv = LLMServer(("127.0.0.1", 0), LLM.load(path), log=False, max_tokens=24)  # random weights never end a turn
  threading.Thread(target=srv.serve_forever, daemon=True).start()
  yield f"http://127.0.0.1:{srv.server_address[1]}/"
  srv.shutdown()
  srv.server_close()


@pytest.fixture(scope="module")
def browser():
  if MISSING: pytest.fail(MISSING + ": CI must run the browser tests (.ci/run installs them)")
  yield from headless_chrome(1100, 800)


def wait(d, cond: str, timeout: float = 60.0):
  end = time.time() + timeout
  while time.time() < end:
    if (v := d.execute_script(f"return {cond}")): return v
    time.sleep(0.05)
  raise AssertionError(f"timed out waiting for {cond}")


def test_chat_page_streams_and_renders(browser, url):
  browser.get(url)
  wait(browser, "document.getElementById('model').textContent === 'tiny-chat'")
  box = browser.find_element(By.ID, "input")
  box.send_keys("Hello there")
  box.send_keys(Keys.ENTER)
  wait(browser, "document.querySelectorAll('.msg.assistant').length === 1 && document.body.dataset.state === 'idle'")
  msgs = browser.find_elements(By.CSS_SELECTOR, "[data-testid=message]")
  assert [m.get_attribute("class") for m in msgs] == ["msg user", "msg assistant"] and msgs[0].text == "Hello there"
  assert "error" not in msgs[1].get_attribute("class")
  # a second turn through the hook; the conversation so far goes with it
  browser.execute_script("window.chat.send('And again')")
  wait(browser, "document.querySelectorAll('.msg').length === 4 && document.body.dataset.state === 'idle'")
  assert browser.execute_script("return window.chat.messages.map(m => m.role)") == ["user", "assistant", "user", "assistant"]
  os.makedirs(ARTIFACTS, exist_ok=True)
  browser.save_screenshot(os.path.join(ARTIFACTS, "llm_chat.png"))


def test_markdown_rendering(browser, url):
  browser.get(url)
  wait(browser, "typeof window.renderMarkdown === 'function'")
  html = browser.execute_script("return window.renderMarkdown(arguments[0])",
                                "# Title\n\nSome **bold** and `code` <script>x</script>\n\n- one\n- two\n\n```py\nprint(1)\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |")
  for part in ("<h1>Title</h1>", "<strong>bold</strong>", "<code>code</code>", "&lt;script&gt;", "<ul><li>one</li><li>two</li></ul>",
               '<pre><code class="language-py">print(1)</code></pre>', "<th>a</th>", "<td>2</td>"):
    assert part in html, (part, html)


@pytest.fixture(scope="module")
def thinking_url(tmp_path_factory):
  from tinyhybrid.llm.runner import Delta
  llm = LLM.load(write_tiny_chat(tmp_path_factory.mktemp("think") / "chat.gguf", 256))
  def stream(ids, params, max_tokens, stop, usage):  # a reasoning model's answer, the tags cut across pieces
    for piece in ("<thi", "nk>Let me ", "think.</th", "ink>\n\nThe **answer**."): yield Delta(piece)
    yield Delta("", "stop")
  llm.stream = stream
  for tag in ("<think>", "</think>"): llm.tok.token_to_id.setdefault(tag, -1)  # a vocabulary that has them
  srv = LLMServer(("127.0.0.1", 0), llm, log=False)
  threading.Thread(target=srv.serve_forever, daemon=True).start()
  yield f"http://127.0.0.1:{srv.server_address[1]}/"
  srv.shutdown()
  srv.server_close()


def test_reasoning_shows_folded_above_the_answer(browser, thinking_url):
  browser.get(thinking_url)
  wait(browser, "document.getElementById('model').textContent === 'tiny-chat'")
  browser.execute_script("window.chat.send('Why?')")
  wait(browser, "document.querySelectorAll('.msg.assistant').length === 1 && document.body.dataset.state === 'idle'")
  fold = browser.find_element(By.CSS_SELECTOR, ".msg.assistant [data-testid=thinking]")
  assert fold.is_displayed() and fold.get_attribute("open") is None and fold.text == "Thinking"  # folded: the summary only
  assert "<strong>answer</strong>" in browser.execute_script("return document.querySelector('.msg.assistant').innerHTML")
  fold.find_element(By.TAG_NAME, "summary").click()
  wait(browser, "document.querySelector('[data-testid=thinking]').open")
  assert "Let me think." in fold.text
  assert browser.execute_script("return window.chat.messages[1]") == {"role": "assistant", "content": "The **answer**.", "reasoning_content": "Let me think."}
