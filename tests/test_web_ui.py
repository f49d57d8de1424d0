"""`run --web`: Locust's web UI with the MRTR tab, in a real headless browser (Debian's chromium and chromedriver).

A person on call opens the page while the run goes and sees the tab; at the end its counts
are the run's own (summary.json). The controls that would break the scenario's timeline are
refused.
"""

from __future__ import annotations

import json
import os
import re
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
                 "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1600,1000"):  # a desktop's width: a narrow page folds its header's buttons away
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(require_binary("chromedriver")), options=options)


def tab_rows(driver, url: str, timeout: float = 30.0) -> dict[tuple[str, str], str]:
    """The MRTR tab's table as the page shows it: (what, of) -> count."""
    from selenium.common.exceptions import WebDriverException

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
        rows = shown_rows(driver)
        if ("rejections", "all") in rows:
            return rows
        time.sleep(0.5)
    raise AssertionError(f"the MRTR tab showed no table within {timeout:g}s: {driver.page_source[-1500:]}")


def shown_rows(driver) -> dict[tuple[str, str], str]:
    """The MRTR tab's table as the page shows it now, read in one go (the page redraws it every couple of seconds)."""
    rows = driver.execute_script("return [...document.querySelectorAll('table tbody tr')].map("
                                 "row => [...row.querySelectorAll('td')].map(cell => cell.innerText.trim()))")
    return {(cells[0], cells[1]): cells[2] for cells in rows if len(cells) == 3}


def refused(url: str) -> int:
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="POST", data=b""), timeout=5)
    except urllib.error.HTTPError as answer:
        return answer.code
    return 200


def header_buttons(driver) -> tuple[set[str], set[str]]:
    """The page's buttons as it has them now: (those a person sees, those only in the page), read in one go (the
    page redraws every couple of seconds)."""
    buttons = driver.execute_script("return [...document.querySelectorAll('button')].map("
                                    "b => [b.textContent.trim(), b.offsetParent !== null])")
    return {text for text, seen in buttons if seen}, {text for text, seen in buttons if not seen}


def click_stop(driver) -> bool:
    """Click the STOP button a person sees (found again if the page redrew it meanwhile)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        for button in driver.find_elements(By.TAG_NAME, "button"):
            if (button.get_attribute("textContent") or "").strip() == "Stop" and button.is_displayed():
                button.click()
                return True
    except StaleElementReferenceException:
        pass
    return False


def locust_rows(port: int) -> list[dict]:
    """Locust's statistics rows of the rounds so far (none until a round has ended)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats/requests", timeout=5) as answer:
        live = json.load(answer)
    return [row for row in live["stats"] if row["name"] != "Aggregated"]


def wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.3)
    raise AssertionError(f"no {what} within {timeout:g}s")


def final_counts(summary: dict) -> dict[tuple[str, str], str]:
    """The MRTR tab's rows that must show summary.json's counts once the run ended."""
    rejections = summary["rejections"]
    wanted = {("rejections", "all"): str(rejections["total_logged"]),
              ("reconciliation", "client -32602 answers"): str(rejections["client_rejections"]),
              ("reconciliation", "unexplained (matched when the load stops)"): str(rejections["unexplained"])}
    for reason, replicas in rejections["by_reason"].items():
        for replica, count in replicas.items():
            wanted[("rejections", f"{reason} on {replica}")] = str(count)
    return wanted


def written(path: Path) -> dict | None:
    """The JSON document at `path`, or None while it is not there whole."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def shown_once(read, done, timeout: float) -> dict:
    """What `read()` gives once `done` holds for it (the page fetches its counts every couple of seconds), or what
    it gave last when `timeout` runs out: the assertions after it say what differs."""
    deadline = time.monotonic() + timeout
    while not done(rows := read()) and time.monotonic() < deadline:
        time.sleep(0.5)
    return rows


def test_the_live_page_stops_the_run_as_ctrl_c_does_and_its_mrtr_tab_ends_with_summary_json_s_counts(
        tmp_path: Path) -> None:
    """A person on call opens the page while the run goes: Locust's rows are tool rounds with their answers'
    sizes, the header counts flows in flight, the controls that would break the scenario are hidden (and refused),
    STOP ends the run as Ctrl-C does (exit 130, results written), and the MRTR tab's last counts are the run's."""
    from selenium.webdriver.common.by import By

    require_binary("chromium")
    scenario = tmp_path / "web.toml"
    scenario.write_text(SCENARIO)
    port = free_port()
    run = subprocess.Popen([sys.executable, "-m", "harness", "run", str(scenario), "--results", str(tmp_path / "r"),
                            "--quiet", "--web", f"127.0.0.1:{port}", "--web-linger", "15s"],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    driver = browser()
    try:
        url = f"http://127.0.0.1:{port}/?tab=mrtr"
        during = tab_rows(driver, url, timeout=60)
        assert ("reconciliation", "client -32602 answers") in during
        assert refused(f"http://127.0.0.1:{port}/stats/reset") == 403
        assert refused(f"http://127.0.0.1:{port}/swarm") == 403
        wait_for(lambda: "Stop" in header_buttons(driver)[0], 20, "STOP button")
        shown, hidden = header_buttons(driver)
        assert {"Edit", "Reset"} <= hidden and not {"Edit", "Reset", "New"} & shown, (shown, hidden)
        assert driver.find_elements(By.XPATH, "//*[text()='Flows in flight']")
        assert not driver.find_elements(By.XPATH, "//*[text()='Users']")
        rows = wait_for(lambda: locust_rows(port), 60, "a round in Locust's statistics")
        assert rows and all(re.fullmatch(r"\w+ round (\d|10\+)", row["name"]) for row in rows), rows
        assert all(row["avg_content_length"] > 0 for row in rows), rows
        wait_for(lambda: any(what == "chaos actions" and of.startswith("restart, last at 4") and n == "1"
                             for (what, of), n in shown_rows(driver).items()), 60, "the restart in the MRTR tab")
        [link] = driver.find_elements(By.LINK_TEXT, "MRTR charts over time")
        # the charts page's first request asks the run's fold, whose answer covers every record before it
        with urllib.request.urlopen(link.get_attribute("href"), timeout=10) as answer:
            charts = answer.read().decode()
        titles = re.findall(r"<title>([^<]*)</title>", charts)
        assert [title for title in titles if title.startswith("Rejections on r")], titles
        assert "Rounds per call, by flow" in titles and ">restart" in charts, titles  # the restart marked
        assert [title for title in titles if title.startswith("Flows in flight")], titles
        wait_for(lambda: click_stop(driver), 10, "STOP to click")
        summary_path = wait_for(lambda: next(iter((tmp_path / "r").glob("*/summary.json")), None), 120,
                                "summary.json after STOP")
        summary = wait_for(lambda: written(summary_path), 30, "summary.json written whole")
        wanted = final_counts(summary)
        final = shown_once(lambda: tab_rows(driver, url), lambda rows: all(rows.get(what) == count
                                                                            for what, count in wanted.items()), 30)
        output, _ = run.communicate(timeout=60)  # the linger ends, and with it the run
    finally:
        driver.quit()
        if run.poll() is None:
            run.terminate()
            run.communicate(timeout=60)
    assert run.returncode == 130, output  # as after Ctrl-C
    assert (summary["status"], summary["reason"]) == ("interrupted", "stopped from the web UI (STOP)"), summary
    journal = [json.loads(line) for line in next(summary_path.parent.glob("journal.jsonl")).read_text().splitlines()]
    assert sum(r["type"] == "start" for r in journal) == sum(r["type"] == "flow" for r in journal)
    assert summary["rejections"]["total_logged"] > 0, output  # the chaos made some: the comparison is not of zeros
    assert {what: final.get(what) for what in wanted} == wanted
    restarts = sum(1 for action in summary["chaos"] if action["action"] == "restart")
    [(label, count)] = [(of, n) for (what, of), n in final.items() if what == "chaos actions" and "restart" in of]
    assert count == str(restarts) and label.startswith("restart, last at 4.")
    assert not [key for key in final if key[0] == "in flight (most wait on a lead)" and final[key] != "0"]
    sizes = summary["request_state_bytes"]["refund"]
    assert final[("requestState size (bytes)", "refund round 1 max")]
    assert int(final[("requestState size (bytes)", "refund round 1 max")]) <= sizes["1"]["max"]


def post(url: str, headers: dict[str, str]) -> tuple[int, dict[str, str]]:
    """A POST as a browser tab (or a script) sends it: its status and answer headers."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="POST", data=b"", headers=headers),
                                    timeout=10) as answer:
            return answer.status, dict(answer.headers)
    except urllib.error.HTTPError as answer:
        return answer.code, dict(answer.headers)


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str]]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as answer:
            answer.read()
            return answer.status, dict(answer.headers)
    except urllib.error.HTTPError as answer:
        return answer.code, dict(answer.headers)


def _answers(url: str) -> bool:
    try:
        return get(url)[0] == 200
    except urllib.error.URLError:
        return False


def chaos_rows(port: int) -> list[dict]:
    """The MRTR tab's chaos rows as the page reads them (`/stats/requests`)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats/requests", timeout=5) as answer:
        live = json.load(answer)
    [tab] = live["extended_stats"]
    return [row for row in tab["data"] if row["section"] == "chaos actions"]


def test_another_sites_page_cannot_stop_the_run_and_the_token_from_the_page_s_origin_does(tmp_path: Path) -> None:
    """A tab of another site posts to /stop (a simple cross-site POST, as a form sends it): 403, and the run goes on
    to its chaos step; the token alone from another origin, or the page's origin without the token, is refused too;
    no answer carries Locust's open CORS; a page asked for by another host name (DNS rebinding) is refused. Then the
    token printed with the URL, from the page's own origin, stops the run as Ctrl-C does."""
    scenario = tmp_path / "web.toml"
    scenario.write_text(SCENARIO)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    run = subprocess.Popen([sys.executable, "-m", "harness", "run", str(scenario), "--results", str(tmp_path / "r"),
                            "--quiet", "--web", f"127.0.0.1:{port}"],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        assert run.stdout is not None
        for line in run.stdout:  # the run says the URL (and the token) as it starts the page
            lines.append(line)
            if line.startswith("web UI: "):
                break
        else:
            raise AssertionError("".join(lines))
        wait_for(lambda: _answers(f"{base}/"), 30, "the page")
        evil = {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site",
                "Content-Type": "application/x-www-form-urlencoded"}
        status, headers = post(f"{base}/stop", evil)
        assert status == 403 and not any(name.lower().startswith("access-control-") for name in headers), headers
        found = re.search(r"X-MRTR-Token: (\S+)", lines[-1])
        assert found is not None, lines[-1]
        token = found.group(1)
        assert post(f"{base}/stop", {**evil, "X-MRTR-Token": token})[0] == 403
        assert post(f"{base}/stop", {"Origin": base, "Sec-Fetch-Site": "same-origin"})[0] == 403
        assert post(f"{base}/stop", {"Origin": base, "X-MRTR-Token": token + "x"})[0] == 403
        status, headers = get(f"{base}/", {"Origin": "http://evil.example"})
        assert status == 200 and not any(name.lower().startswith("access-control-") for name in headers), headers
        assert get(f"{base}/", {"Host": f"evil.example:{port}"})[0] == 403
        wait_for(lambda: [row for row in chaos_rows(port) if row["label"].startswith("restart")], 60,
                 "the chaos step at 4s, after the refused STOPs")
        assert run.poll() is None
        status, _ = post(f"{base}/stop", {"Origin": base, "Sec-Fetch-Site": "same-origin", "X-MRTR-Token": token})
        assert status == 200
        rest, _ = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.terminate()
            run.communicate(timeout=60)
    output = "".join(lines) + rest
    assert run.returncode == 130, output
    [summary_path] = (tmp_path / "r").glob("*/summary.json")
    summary = json.loads(summary_path.read_text())
    assert (summary["status"], summary["reason"]) == ("interrupted", "stopped from the web UI (STOP)"), summary
    assert "restart" in [action["action"] for action in summary["chaos"]], summary["chaos"]


def test_off_loopback_the_page_needs_its_password_or_the_run_does_not_start(tmp_path: Path) -> None:
    scenario = tmp_path / "web.toml"
    scenario.write_text(SCENARIO)
    env = {key: value for key, value in os.environ.items() if key != "MRTR_WEB_PASSWORD"}
    done = subprocess.run([sys.executable, "-m", "harness", "run", str(scenario), "--results", str(tmp_path / "r"),
                           "--quiet", "--web", f"0.0.0.0:{free_port()}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 2 and "MRTR_WEB_PASSWORD is not set" in done.stderr, done.stderr
    assert not (tmp_path / "r").exists() or not list((tmp_path / "r").iterdir())


def test_off_loopback_every_request_needs_the_password_and_a_control_still_needs_the_token() -> None:
    """The guard the page asks first (no page is served off loopback in tests: all traffic stays on 127.0.0.1)."""
    from harness.run.page_guard import PageGuard

    guard = PageGuard("t" * 32, "the-password", loopback=False)
    host, same = "harness.example:8089", {"Origin": "http://harness.example:8089"}
    assert guard.refusal("GET", host, {}, None) == (401, "log in with the password in MRTR_WEB_PASSWORD "
                                                         "(any user name)")
    assert guard.refusal("GET", host, {}, "wrong") is not None
    assert guard.refusal("GET", host, {}, "the-password") is None
    assert guard.refusal("POST", host, same, "the-password")[0] == 403  # type: ignore[index]
    assert guard.refusal("POST", host, {**same, "X-MRTR-Token": "t" * 32}, "the-password") is None
    assert PageGuard("t" * 32).refusal("GET", "127.0.0.1:8089", {}, None) is None
    assert PageGuard("t" * 32).refusal("GET", "[::1]:8089", {}, None) is None
    assert PageGuard("t" * 32).refusal("GET", "rebound.example:8089", {}, None)[0] == 403  # type: ignore[index]
