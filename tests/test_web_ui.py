"""`run --web`: Locust's web UI with the MRTR tab, in a real headless browser (Debian's chromium and chromedriver).

A person on call opens the page while the run goes and sees the tab; at the end its counts
are the run's own (summary.json). The controls that would break the scenario's timeline are
refused.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.harness_run import ROOT
from tests.services import free_port, require_binary

SCENARIO = """
name = "web"
seed = 3
duration = "14s"
time_scale = 60

[target]
kind = "embedded"
replicas = 2
keyring = "ephemeral"       # each replica its own key: retries on the other replica read `unknown key`

[load]
arrival_rate = 3
routing = "other-replica"

[[flows]]
kind = "refund"
amount = "above-limit"

[leads]
think = { dist = "constant", value = "30s" }

[[chaos]]
at = "4s"
action = "restart"
"""


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = require_binary("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                 "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(require_binary("chromedriver")), options=options)


def tab_rows(driver, url: str, timeout: float = 30.0) -> dict[tuple[str, str], str]:
    """The MRTR tab's table as the page shows it: (what, of) -> count."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    while True:  # the web UI comes up with the load, after the target
        try:
            driver.get(url)
            break
        except WebDriverException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    while time.monotonic() < deadline:
        rows = {}
        for row in driver.find_elements(By.CSS_SELECTOR, "table tbody tr"):
            cells = [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
            if len(cells) == 3:
                rows[(cells[0], cells[1])] = cells[2]
        if ("rejections", "all") in rows:
            return rows
        time.sleep(0.5)
    raise AssertionError(f"the MRTR tab showed no table within {timeout:g}s: {driver.page_source[-1500:]}")


def refused(url: str) -> int:
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="POST", data=b""), timeout=5)
    except urllib.error.HTTPError as answer:
        return answer.code
    return 200


def test_the_mrtr_tab_loads_during_the_run_and_ends_with_summary_json_s_counts(tmp_path: Path) -> None:
    require_binary("chromium")
    scenario = tmp_path / "web.toml"
    scenario.write_text(SCENARIO)
    port = free_port()
    run = subprocess.Popen([sys.executable, "-m", "harness", "run", str(scenario), "--results", str(tmp_path / "r"),
                            "--quiet", "--web", f"127.0.0.1:{port}", "--web-linger", "40s"],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    driver = browser()
    try:
        url = f"http://127.0.0.1:{port}/?tab=mrtr"
        during = tab_rows(driver, url, timeout=60)
        assert ("reconciliation", "client -32602 answers") in during
        assert refused(f"http://127.0.0.1:{port}/stop") == 403  # the scenario stops the run, not a button
        assert refused(f"http://127.0.0.1:{port}/stats/reset") == 403
        deadline = time.monotonic() + 120
        while not list((tmp_path / "r").glob("*/summary.json")) and time.monotonic() < deadline:
            time.sleep(0.5)
        [summary_path] = list((tmp_path / "r").glob("*/summary.json"))
        time.sleep(2)  # the page polls every couple of seconds: let it fetch the final counts
        final = tab_rows(driver, url)
    finally:
        driver.quit()
        run.terminate()
        output, _ = run.communicate(timeout=60)
    summary = json.loads(summary_path.read_text())
    rejections = summary["rejections"]
    assert rejections["total_logged"] > 0, output  # the chaos made some: the comparison is not of zeros
    assert final[("rejections", "all")] == str(rejections["total_logged"])
    for reason, replicas in rejections["by_reason"].items():
        for replica, count in replicas.items():
            assert final[("rejections", f"{reason} on {replica}")] == str(count)
    assert final[("reconciliation", "client -32602 answers")] == str(rejections["client_rejections"])
    assert final[("reconciliation", "unexplained (matched when the load stops)")] == str(rejections["unexplained"])
    restarts = sum(1 for action in summary["chaos"] if action["action"] == "restart")
    [(label, count)] = [(of, n) for (what, of), n in final.items() if what == "chaos actions" and "restart" in of]
    assert count == str(restarts) and label.startswith("restart, last at 4.")
    assert not [key for key in final if key[0] == "in flight (most wait on a lead)" and final[key] != "0"]
