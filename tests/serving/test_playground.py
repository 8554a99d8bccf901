"""The browser playground (``omni serve`` at ``/``), driven in headless Chromium against the
suite's real servers of tiny models: an image decoded in the page, a video job whose progress
bar moves before a playable video, speech that starts playing before its request ends, a chat
turn with a spoken answer, the server's error message, the API key prompt, and the page's
safety rules (its Content-Security-Policy, Trusted Types, user text as text).

The browser is Debian's ``chromium`` with its ``chromedriver`` (``nox -s tests`` installs them
with apt-get); without them these tests fail, never skip. One browser serves the session.
Each test writes a screenshot to ``out/playground/`` (or ``$OMNI_PLAYGROUND_SHOTS``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import API_KEY, LiveServer, server_config

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SHOTS = Path(os.environ.get("OMNI_PLAYGROUND_SHOTS", Path(__file__).parents[2] / "out/playground"))
WAIT_S = 90


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.fail(
            f"the playground tests need Debian's chromium and chromium-driver ({', '.join(missing)}"
            " missing): `nox -s tests` installs them with apt-get",
            pytrace=False,
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,1100",
        "--autoplay-policy=no-user-gesture-required",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_script_timeout(WAIT_S)
    SHOTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()


class Page:
    """The playground open in the browser, with waits and helpers by ``data-testid``."""

    def __init__(self, driver: Any, server: LiveServer) -> None:
        self.driver, self.server = driver, server

    def open(self, *, key: str | None = API_KEY, path: str = "/") -> Page:
        self.driver.get(f"{self.server.url}{path}")
        self.driver.execute_script("window.localStorage.clear()")
        self.driver.get(f"{self.server.url}{path}")
        if key is not None:
            self.wait(lambda: self.by("key-needed").is_displayed(), errors_ok=True)
            self.by("api-key").send_keys(key)
            self.driver.find_element("id", "key-use").click()
            self.wait(lambda: self.driver.execute_script("return document.body.dataset.models"))
        self.driver.get_log("browser")  # what follows is this test's
        return self

    def by(self, testid: str) -> Any:
        return self.driver.find_element("css selector", f'[data-testid="{testid}"]')

    def all(self, testid: str) -> list[Any]:
        return self.driver.find_elements("css selector", f'[data-testid="{testid}"]')

    def wait(
        self, predicate: Callable[[], Any], timeout: float = WAIT_S, *, errors_ok: bool = False
    ) -> Any:
        """Poll ``predicate``; an error the page shows fails at once (unless expected)."""
        from selenium.webdriver.support.ui import WebDriverWait

        def check(_: Any) -> Any:
            error = self.driver.execute_script(
                "const e = document.querySelector('[data-testid=error]');"
                "return e && !e.hidden ? e.textContent : null"
            )
            if error and not (errors_ok or self.expect_error):
                raise AssertionError(f"the page shows an error: {error}")
            return predicate()

        from selenium.common.exceptions import StaleElementReferenceException

        waiting = WebDriverWait(
            self.driver,
            timeout,
            poll_frequency=0.05,
            ignored_exceptions=(StaleElementReferenceException,),  # the page redrew it
        )
        return waiting.until(check)

    expect_error = False

    def choose(self, testid: str, value: str) -> None:
        from selenium.webdriver.support.ui import Select

        Select(self.by(testid)).select_by_value(value)

    def pick(self, model: str, task: str) -> None:
        self.choose("model-select", model)
        self.wait(lambda: task in self.values("task-select"))
        self.choose("task-select", task)

    def values(self, testid: str) -> list[str]:
        return self.driver.execute_script(
            "return [...arguments[0].options].map(o => o.value)", self.by(testid)
        )

    def fill(self, testid: str, text: str) -> None:
        element = self.by(testid)
        element.clear()
        element.send_keys(text)

    def data(self, element: Any) -> dict[str, str]:
        return self.driver.execute_script("return {...arguments[0].dataset}", element)

    def shot(self, name: str) -> Path:
        path = SHOTS / f"{name}.png"
        self.driver.save_screenshot(str(path))
        return path

    def console_problems(self) -> list[str]:
        """Errors the page logged (a CSP violation, an uncaught exception)."""
        return [e["message"] for e in self.driver.get_log("browser") if e["level"] == "SEVERE"]


@pytest.fixture()
def page(browser: Any, live_server: LiveServer) -> Page:
    return Page(browser, live_server)


@pytest.fixture()
def chat_page(browser: Any, chat_server: LiveServer) -> Page:
    return Page(browser, chat_server)


def _png(path: Path, size: int = 32) -> Path:
    """A small PNG: the upload a user picks."""
    from PIL import Image

    Image.new("RGB", (size, size), (200, 40, 40)).save(path)
    return path


# -- the page itself -----------------------------------------------------------------------------


def test_page_is_served_with_a_strict_policy(live_server: LiveServer) -> None:
    for path in ("/", "/playground"):
        response = httpx.get(f"{live_server.url}{path}", timeout=30)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("text/html")
        csp = response.headers["content-security-policy"]
        for rule in (
            "default-src 'none'",
            "script-src 'self'",
            "connect-src 'self'",
            "frame-ancestors 'none'",
            "require-trusted-types-for 'script'",
        ):
            assert rule in csp, csp
        assert 'data-testid="api-key"' in response.text
    script = httpx.get(f"{live_server.url}/playground/static/app.js", timeout=30)
    assert script.headers["content-type"].startswith("text/javascript")
    assert "content-security-policy" in script.headers
    assert httpx.get(f"{live_server.url}/playground/static/nope.js", timeout=30).status_code == 404
    # Nothing of the page reaches another origin: no absolute URL in any of its files.
    for name in ("index.html", "app.js", "api.js", "tasks.js", "chat.js", "audio.js"):
        text = httpx.get(f"{live_server.url}/playground/static/{name}", timeout=30).text
        if name == "index.html":
            text = httpx.get(f"{live_server.url}/", timeout=30).text
        assert "http://" not in text and "https://" not in text, name


def test_no_playground_leaves_the_page_out(live_server: LiveServer) -> None:
    from fastapi.testclient import TestClient

    from omni_core.serving import create_app

    def app(**fields: Any) -> TestClient:  # no lifespan: nothing loads
        config = server_config(live_server.checkpoints, live_server.state_dir, **fields)
        return TestClient(create_app(config), base_url="http://127.0.0.1")

    assert app().get("/").status_code == 200
    off = app(playground=False)
    for path in ("/", "/playground", "/playground/static/app.js"):
        assert off.get(path).status_code == 404, path


def test_the_page_asks_for_the_key_and_remembers_it_only_when_told(page: Page) -> None:
    page.expect_error = True
    page.open(key=None)
    page.wait(lambda: page.by("key-needed").is_displayed())
    assert "API key" in page.by("error").text
    assert page.values("model-select") == []
    page.shot("api-key")
    page.by("api-key").send_keys(API_KEY)
    page.driver.find_element("id", "key-use").click()
    page.wait(lambda: len(page.values("model-select")) >= 1)
    assert not page.by("key-needed").is_displayed()
    stored = page.driver.execute_script("return {...window.localStorage}")
    assert stored == {}, "the key is kept in memory only"
    page.by("remember-key").click()
    assert API_KEY in page.driver.execute_script("return Object.values(window.localStorage)")
    page.driver.refresh()  # remembered: the page loads the models without asking
    page.wait(lambda: len(page.values("model-select")) >= 1)
    page.by("remember-key").click()
    assert page.driver.execute_script("return window.localStorage.length") == 0


def test_trusted_types_refuse_html_from_strings(page: Page) -> None:
    page.open()
    outcome = page.driver.execute_script(
        "try { document.body.insertAdjacentHTML('beforeend', '<b>x</b>'); return 'allowed' }"
        " catch (e) { return e.name }"
    )
    assert outcome == "TypeError"


# -- the tasks -----------------------------------------------------------------------------------


def test_generate_an_image(page: Page) -> None:
    page.server.need("qwen")
    page.open()
    page.pick("qwen", "image")
    page.fill("prompt", "a red <b>square</b>")
    page.fill("field-size", "32x32")
    page.fill("field-num_inference_steps", "2")
    page.fill("field-seed", "7")
    page.by("generate").click()
    image = page.wait(lambda: page.all("result-image") and page.all("result-image")[0])
    page.wait(lambda: page.data(image).get("decoded") == "true")
    width = page.driver.execute_script("return arguments[0].naturalWidth", image)
    assert width == 32
    assert "image(s) in" in page.by("timings").text
    item = page.all("gallery-item")[0]
    assert "a red <b>square</b>" in item.text  # the prompt as text, never as markup
    assert not item.find_elements("css selector", ".what b")
    page.driver.execute_script("arguments[0].open = true", item.find_element("tag name", "details"))
    curl = page.by("snippet-curl").get_attribute("textContent")
    python = page.by("snippet-python").get_attribute("textContent")
    assert "/v1/images/generations" in curl and "$OMNI_API_KEY" in curl
    assert API_KEY not in curl and API_KEY not in python
    body = json.loads(curl.split("-d '", 1)[1].rsplit("'", 1)[0])
    assert body == {
        "model": "qwen",
        "prompt": "a red <b>square</b>",
        "size": "32x32",
        "seed": 7,
        "num_inference_steps": 2,
        "response_format": "b64_json",
    }
    compile(python, "snippet.py", "exec")
    assert "client.images.generate(" in python
    page.shot("image")
    assert page.console_problems() == []


def test_edit_images(page: Page, tmp_path: Path) -> None:
    page.server.need("qwen-edit")
    page.open()
    page.pick("qwen-edit", "edit")
    page.by("field-image").send_keys(str(_png(tmp_path / "input.png")))
    page.fill("prompt", "make it blue")
    page.fill("field-size", "32x32")
    page.fill("field-num_inference_steps", "2")
    page.by("generate").click()
    image = page.wait(lambda: page.all("result-image") and page.all("result-image")[0])
    page.wait(lambda: page.data(image).get("decoded") == "true")
    assert "-F 'image=@input.png'" in page.by("snippet-curl").get_attribute("textContent")
    page.shot("edit")


def test_a_video_job_shows_progress_then_a_player(page: Page) -> None:
    page.server.need("wan")
    page.open()
    page.pick("wan", "video")
    page.fill("prompt", "a boat at sea")
    page.fill("field-size", "32x32")
    page.fill("field-num_frames", "5")
    page.fill("field-num_inference_steps", "40")
    page.by("generate").click()
    video = page.wait(lambda: page.all("result-video") and page.all("result-video")[0])
    seen = [int(v) for v in page.data(page.by("progress"))["seen"].split(",")]
    assert seen[-1] == 100 and any(0 < v < 100 for v in seen), seen
    assert video.get_attribute("src").startswith("blob:")
    page.wait(lambda: page.driver.execute_script("return arguments[0].readyState", video) >= 2)
    duration = page.driver.execute_script("return arguments[0].duration", video)
    assert duration > 0
    assert page.driver.execute_script("return arguments[0].error", video) is None
    page.shot("video")


def test_speech_plays_before_the_request_ends(page: Page) -> None:
    page.server.need("tts")
    page.open()
    page.pick("tts", "speech")
    voices = page.values("voice-select")
    assert voices, "the voice picker lists the model's voices"
    # The upload form (with its consent box) is for models that clone voices; this one does not.
    assert not page.by("voice-upload").is_displayed()
    page.choose("voice-select", voices[-1])
    text = " ".join(f"This is sentence number {i} of the playground test." for i in range(12))
    page.fill("prompt", text)
    page.by("generate").click()
    audio = page.wait(lambda: page.all("result-audio") and page.all("result-audio")[0])
    page.wait(lambda: page.data(audio).get("complete") == "true")
    marks = page.data(audio)
    assert int(marks["chunks"]) > 1, marks
    assert float(marks["startedAt"]) < float(marks["doneAt"]), marks
    assert marks["playingOnStart"] == "true", marks
    assert page.driver.execute_script("return arguments[0].src", audio).startswith("blob:")
    page.wait(lambda: page.driver.execute_script("return arguments[0].duration", audio) > 0)
    assert f'voice="{voices[-1]}"' in page.by("snippet-python").get_attribute("textContent")
    page.shot("speech")


def test_a_bad_request_shows_the_servers_message(page: Page, http: httpx.Client) -> None:
    page.server.need("qwen")
    page.open()
    page.expect_error = True
    page.pick("qwen", "image")
    page.fill("prompt", "too big")
    page.fill("field-size", "64x128")
    page.by("generate").click()
    error = page.wait(lambda: page.by("error").is_displayed() and page.by("error"))
    direct = http.post(
        "/v1/images/generations", json={"model": "qwen", "prompt": "too big", "size": "64x128"}
    )
    assert direct.status_code == 400
    assert error.text == direct.json()["error"]["message"]
    page.shot("error")


# -- chat ----------------------------------------------------------------------------------------


def test_a_chat_turn_with_a_spoken_answer(chat_page: Page) -> None:
    page = chat_page
    page.open()
    page.pick("acme-omni", "chat")
    assert page.by("chat-spoken").is_selected()
    hostile = "hello <img src=x> there"
    page.fill("chat-input", hostile)
    page.by("chat-send").click()
    answer = page.wait(
        lambda: [m for m in page.all("chat-message") if page.data(m).get("done") == "true"]
    )[0]
    user = page.all("chat-message")[0]
    assert user.text == hostile and not user.find_elements("tag name", "img")
    assert answer.find_element("class name", "text").text.strip()
    audio = answer.find_element("css selector", '[data-testid="result-audio"]')
    page.wait(lambda: page.data(audio).get("complete") == "true")
    marks = page.data(audio)
    assert float(marks["startedAt"]) < float(marks["doneAt"]), marks
    page.wait(lambda: page.driver.execute_script("return arguments[0].duration", audio) > 0)
    page.shot("chat")
    # A second turn carries the conversation.
    page.fill("chat-input", "and again")
    page.by("chat-send").click()
    page.wait(lambda: len([m for m in page.all("chat-message") if page.data(m).get("done")]) == 2)
    python = page.by("snippet-python").get_attribute("textContent")
    assert "client.chat.completions.create(" in python and '"and again"' in python
    compile(python, "snippet.py", "exec")
    assert page.console_problems() == []
