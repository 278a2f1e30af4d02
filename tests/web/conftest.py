"""What the web page's tests share: headless Debian chromium, started once per worker and
driven by Selenium through Debian's chromedriver (named outright: Selenium Manager downloads
nothing), and ``Page``, which runs Selenium's blocking calls off the event loop the daemon
under test runs on."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

from tests.support.waiting import until

T = TypeVar("T")
CHROMEDRIVER = "/usr/bin/chromedriver"


@pytest.fixture(scope="session")
def browser() -> Iterator[webdriver.Chrome]:
    """Headless chromium for this worker's page tests."""
    if shutil.which("chromium") is None or not shutil.which(CHROMEDRIVER):
        pytest.fail("the page tests need Debian's chromium and chromium-driver (.ci/run)")
    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900"):
        options.add_argument(argument)
    options.binary_location = shutil.which("chromium") or "chromium"
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


class Page:
    """The page in ``browser`` at ``base`` (``http://127.0.0.1:port``), its blocking calls
    in a thread."""

    def __init__(self, browser: webdriver.Chrome, base: str) -> None:
        self.browser, self.base = browser, base

    async def _run(self, call: Callable[[], T]) -> T:
        return await asyncio.to_thread(call)

    async def open(self, path: str = "/") -> None:
        await self._run(lambda: self.browser.get(self.base + path))

    async def click(self, css: str) -> None:
        element = await self.find(css)
        await self._run(element.click)

    async def type(self, css: str, text: str) -> None:
        """Type ``text`` into the field ``css``, as a person would."""
        element = await self.find(css)
        await self._run(lambda: element.send_keys(text))

    async def find(self, css: str) -> WebElement:
        def found() -> WebElement | None:
            elements = self.browser.find_elements(By.CSS_SELECTOR, css)
            return elements[0] if elements and elements[0].is_displayed() else None

        element = await until(lambda: self._run(found), f"{css} on the page")
        assert element is not None
        return element

    async def text(self, css: str) -> str:
        def read() -> str:
            try:
                return "\n".join(e.text for e in self.browser.find_elements(By.CSS_SELECTOR, css))
            except StaleElementReferenceException:  # replaced by an update meanwhile
                return ""

        return await self._run(read)

    async def shows(self, css: str, words: str) -> str:
        """The text of ``css`` once it holds ``words``."""

        async def holding() -> str:
            text = await self.text(css)
            return text if words in text else ""

        return await until(holding, f"{words!r} in {css}")

    async def lacks(self, css: str, words: str) -> None:
        async def gone() -> bool:
            return words not in await self.text(css)

        await until(gone, f"{words!r} gone from {css}")

    async def html(self, css: str) -> str:
        return await self._run(
            lambda: str(self.browser.find_element(By.CSS_SELECTOR, css).get_attribute("innerHTML"))
        )

    async def script(self, code: str) -> object:
        """What ``code`` (a script's body, ``return ...``) returns on the page."""
        return await self._run(lambda: self.browser.execute_script(code))

    async def screenshot(self, path: str) -> None:
        await self._run(lambda: self.browser.save_screenshot(path))
