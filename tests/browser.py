"""Headless chromium for the pages' browser tests (the VIZ page, the LLM chat page): Debian's chromium and
chromium-driver, driven by selenium. In CI (CI set, as .ci/run does, which installs them) nothing may be missing."""
from __future__ import annotations

import os
import shutil
from typing import Any, Iterator

CHROMIUM = next((p for p in (os.getenv("CHROMIUM"), shutil.which("chromium"), shutil.which("chromium-browser")) if p), None)
DRIVER = next((p for p in (os.getenv("CHROMEDRIVER"), shutil.which("chromedriver"), "/usr/lib/chromium/chromedriver") if p and os.path.exists(p)), None)
IN_CI = bool(os.getenv("CI"))
CHROME_MISSING = "chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)" if CHROMIUM is None or DRIVER is None else ""


def headless_chrome(width: int, height: int) -> Iterator[Any]:
  """A headless chromium window of that size, closed when the generator is (a module fixture's body)."""
  from selenium import webdriver
  from selenium.webdriver.chrome.service import Service
  opts = webdriver.ChromeOptions()
  opts.binary_location = CHROMIUM
  for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", f"--window-size={width},{height}"):
    opts.add_argument(a)
  d = webdriver.Chrome(service=Service(DRIVER), options=opts)
  d.set_page_load_timeout(60)
  yield d
  d.quit()
