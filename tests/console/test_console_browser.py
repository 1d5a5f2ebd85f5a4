"""The console in a real browser (Playwright driving the system's Chromium) against the whole local stack: a
job submitted with the CLI goes QUEUED -> RUNNING -> SUCCEEDED on its page without a reload while
its output streams in, the job list filters, the queues page gives a waiting job's reason, and a viewer
outside a queue sees none of its jobs. Skipped only when Chromium or Playwright is missing (`make test`
installs both: the Makefile's browser target)."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.stack_support import free_base_port
from zen_dev.local.environment import overridden_environ
from zen_dev.local.stack import LocalStack, Ports

pytestmark = pytest.mark.e2e

CHROMIUM = os.environ.get("ZEN_TEST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]

if not Path(CHROMIUM).exists():
    pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install -y chromium; `make test` does)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (requirements-dev.txt)")

CONFIG = """
project: zen-console
clusters:
  - name: 1xl4
    gpu_type: nvidia-l4
    gpu_count: 1
    machine_type: g2-standard-8
    regions: [us-central1]
    max_vms_per_region: 2
    max_vms: 2
queues:
  - name: research
    quota: {1xl4: 1}
    users: [alice]
    submitters: [alice]
  - name: vision
    quota: {1xl4: 1}
    users: [bob]
    submitters: [bob]
deadlines:
  heartbeat_timeout_s: 20
  boot_timeout_s: 120
  idle_timeout_s: 30
  stop_timeout_s: 30
  agent_heartbeat_s: 1
  stop_grace_s: 2
scaling:
  boot_estimate_s: 5
"""

SCENARIO = """
project: zen-console
seed: 5
time_scale: 10
capacity:
  default: 4
timings:
  boot: {dist: fixed, s: 50}
  retry_interval_s: 30
  delete_s: 10
"""

HELLO = "import time; print('step one', flush=True); time.sleep(4); print('step two', flush=True); time.sleep(1)"


@pytest.fixture(scope="module")
def stack(stack_forks):
    home = Path(tempfile.mkdtemp(prefix="zcon", dir="/tmp"))  # short: unix socket paths are limited
    (home / "zen.yaml").write_text(CONFIG)
    (home / "scenario.yaml").write_text(SCENARIO)
    stack = LocalStack(home=home / "stack", config_path=home / "zen.yaml", scenario=home / "scenario.yaml",
                       tick_every_s=1.0, ports=Ports.from_base(free_base_port(start=29500)), fresh=True,
                       forks=stack_forks)
    with overridden_environ({"ZEN_CONSOLE_REFRESH_S": "0.5", "ZEN_AS": "alice"}):
        record = stack.up()
    try:
        yield stack, record
    finally:
        stack.down()
        from zen_dev.embedded import stop_embedded_server

        stop_embedded_server(home / "stack")
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield launched
        launched.close()


def submit(stack, record, job_id: str, user: str, queue: str, code: str) -> None:
    """With the CLI, as ``user`` (the stack's identity endpoint signs the sender's ID token for them)."""
    from zen.cli.main import main

    with overridden_environ({**record["env"], "ZEN_AS": user}):
        assert main(["submit", "--job-id", job_id, "--cluster", "1xl4", "--queue", queue, "--label", "team=console",
                     "--", sys.executable, "-c", code]) == 0


def test_a_job_lives_on_its_page_and_the_console_shows_each_viewer_what_they_may_see(stack, browser):
    stack, record = stack
    base = record["console"].rstrip("/")
    expect = sync_api.expect
    expect.set_options(timeout=60_000)  # every wait has this bound; the whole test takes ~30 s
    alice = browser.new_context(extra_http_headers={"X-Zen-As": "alice"})
    # The console's own script and style run under its Content-Security-Policy: none is refused.
    alice.add_init_script("window.refused = []; document.addEventListener('securitypolicyviolation', "
                          "e => window.refused.push(e.violatedDirective + ' ' + e.blockedURI))")
    page = alice.new_page()
    page.set_default_timeout(60_000)

    # The list picks the job up without a reload; its page follows it to the end, output included.
    page.goto(f"{base}/jobs")
    page.evaluate("window.notReloaded = true")
    submit(stack, record, "hello", "alice", "research", HELLO)
    expect(page.locator('tr[data-job="hello"]')).to_be_visible()
    assert page.evaluate("window.notReloaded") is True
    page.click('tr[data-job="hello"] a')
    expect(page.locator("h1")).to_have_text("Job hello")
    page.evaluate("""() => {
        window.notReloaded = true;
        window.seen = [document.getElementById('job-status').textContent];
        new MutationObserver(() => {
            const now = document.getElementById('job-status');
            if (now && window.seen[window.seen.length - 1] !== now.textContent) window.seen.push(now.textContent);
        }).observe(document.getElementById('live'), {childList: true, subtree: true, characterData: true});
    }""")
    expect(page.locator("#output")).to_contain_text("step one")
    assert page.locator("#job-status").text_content() in ("RUNNING", "ASSIGNED")  # the output arrives as it runs
    expect(page.locator("#job-status")).to_have_text("SUCCEEDED")
    expect(page.locator("#output")).to_contain_text("step two")
    expect(page.locator("#output-state")).to_contain_text("the job ended (SUCCEEDED)")
    seen = page.evaluate("window.seen")
    print("statuses seen on the page:", seen)
    assert page.evaluate("window.notReloaded") is True
    # ASSIGNED lasts a heartbeat, between two fetches of the page: it may or may not be caught.
    assert [s for s in seen if s != "ASSIGNED"] == ["QUEUED", "RUNNING", "SUCCEEDED"], seen
    expect(page.locator("#job-why")).to_contain_text("ended:")
    expect(page.locator("#history")).to_contain_text("RUNNING")
    assert page.evaluate("getComputedStyle(document.querySelector('header')).backgroundColor") == "rgb(241, 243, 245)"
    assert page.evaluate("window.refused") == []

    # One GPU of quota: a long job holds it, the next waits, and the queues page says why.
    submit(stack, record, "long", "alice", "research", "import time; time.sleep(6)")
    expect_status(page, base, "long", ("QUEUED", "ASSIGNED", "RUNNING"))
    submit(stack, record, "waits", "alice", "research", "print('finally')")
    page.goto(f"{base}/queues")
    expect(page.locator('tr[data-job="waits"] .why-cell')).to_contain_text("waiting for quota: queue research holds 1")

    # Filtering the list: by status, then by a label no job has; every field has its label, the page its landmarks.
    page.goto(f"{base}/jobs")
    expect(page.get_by_role("navigation", name="Console pages")).to_be_visible()
    expect(page.get_by_role("main")).to_be_visible()
    for label in ("Job id", "User", "Queue", "Status", "Label", "Array"):
        expect(page.get_by_label(label, exact=True)).to_have_count(1)
    page.select_option("select[name=status]", "SUCCEEDED")
    page.click("form[aria-label='Filter the jobs'] button")
    expect(page.locator("#jobs-table tbody tr[data-job]")).to_have_count(1)
    expect(page.locator('tr[data-job="hello"]')).to_be_visible()
    assert "status=SUCCEEDED" in page.url
    page.fill("input[name=label]", "team=other")
    page.click("form[aria-label='Filter the jobs'] button")
    expect(page.locator("#jobs-table")).to_contain_text("No jobs match.")

    # Bob belongs to vision only: none of research's jobs, not even by their id.
    bob = browser.new_context(extra_http_headers={"X-Zen-As": "bob"}).new_page()
    bob.goto(f"{base}/jobs")
    expect(bob.locator("#viewer")).to_have_text("bob")
    expect(bob.locator("#jobs-table")).to_contain_text("No jobs match.")
    answer = bob.goto(f"{base}/jobs/hello")
    assert answer.status == 404
    expect(bob.locator("#error-detail")).to_have_text("no job hello that bob may see")
    bob.goto(f"{base}/queues")
    expect(bob.locator("#section-research")).to_contain_text("Its jobs are its members' to see.")
    expect(bob.locator('tr[data-job="waits"]')).to_have_count(0)


def expect_status(page, base: str, job_id: str, statuses: tuple[str, ...], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        answer = page.request.get(f"{base}/jobs/{job_id}?fragment=1")
        if answer.ok and any(f">{s}<" in answer.text() for s in statuses):
            return
        time.sleep(0.3)
    raise AssertionError(f"{job_id} never reached {statuses}")


TICKS = "import time\nfor n in range(1, 13):\n    print(f'tick {n}', flush=True); time.sleep(0.7)"
# The page's EventSources and fetches, counted; and a tab hidden or shown as the browser does it.
WATCH = """
window.sources = []; window.fetches = 0;
const Source = window.EventSource, fetched = window.fetch.bind(window);
window.EventSource = function (url) { const s = new Source(url); s.url0 = url; window.sources.push(s); return s; };
window.fetch = function (...a) { window.fetches += 1; return fetched(...a); };
window.setHidden = (hidden) => {
  Object.defineProperty(document, 'hidden', {value: hidden, configurable: true});
  Object.defineProperty(document, 'visibilityState', {value: hidden ? 'hidden' : 'visible', configurable: true});
  document.dispatchEvent(new Event('visibilitychange'));
};
"""


def test_a_hidden_tab_asks_nothing_and_shown_again_resumes_after_its_last_line(stack, browser):
    """A tab left open in the background kept polling its page every refresh and reopening its job's output
    stream every 5 minutes: the console's instance billed, and the database read, for as long as the tab
    stayed open. Hidden, it now asks nothing; shown again, it asks at once and its output resumes after
    the last line it got, each line once."""
    stack, record = stack
    base = record["console"].rstrip("/")
    expect = sync_api.expect
    expect.set_options(timeout=60_000)
    context = browser.new_context(extra_http_headers={"X-Zen-As": "alice"})
    context.add_init_script(WATCH)
    page = context.new_page()
    submit(stack, record, "ticks", "alice", "research", TICKS)
    expect_status(page, base, "ticks", ("QUEUED", "ASSIGNED", "RUNNING"))  # its page exists
    page.goto(f"{base}/jobs/ticks")
    expect(page.locator("#output")).to_contain_text("tick 2")
    page.evaluate("window.setHidden(true)")
    assert page.evaluate("window.sources.map(s => s.readyState)") == [2]  # EventSource.CLOSED
    fetches = page.evaluate("window.fetches")
    time.sleep(2.0)  # four refresh periods (ZEN_CONSOLE_REFRESH_S 0.5): none may ask
    assert page.evaluate("window.fetches") == fetches
    assert page.evaluate("window.sources.length") == 1
    page.evaluate("window.setHidden(false)")
    expect(page.locator("#output-state")).to_contain_text("the job ended (SUCCEEDED)")
    assert page.evaluate("window.fetches") > fetches
    resumed = page.evaluate("window.sources[1].url0")
    assert "?after=" in resumed, resumed
    lines = [line for line in page.locator("#output").text_content().splitlines() if "tick" in line]
    assert [line.rsplit(" ", 1)[-1] for line in lines] == [str(n) for n in range(1, 13)], lines
