"""`airlock lab run ... --keep` on the live page in a real browser: each verdict of the
student's code wears a "student code" badge, and the overruled one names its rule."""

from __future__ import annotations

import os
import re
import shutil
import signal
from pathlib import Path

from course import catalog
from course.catalog import build_wrong_solution
from tests.browser.conftest import skip_module_unless_browser
from tests.conftest import ROOT
from tests.labs.support import kept_lab_run

skip_module_unless_browser()

SCREENSHOT = ROOT / "docs" / "lab-run.png"
SEPARATION = catalog.find("separation")
UP_S = 120.0


def test_a_lab_run_marks_student_code_on_the_page(page, tmp_path: Path) -> None:
    """The run's page shows the student's verdicts with a badge; the Arabic-Indic answer the
    student passed is rejected by student.not_narrow, badge and rule on its card."""
    from playwright.sync_api import expect

    root = tmp_path / "labs"
    lab = shutil.copytree(SEPARATION.folder, root / "separation")
    toml = lab / "lab.toml"
    toml.write_text(toml.read_text().replace('emails = ["corpus/handmade", "./emails"]',
                                             'emails = ["corpus/handmade/benign-en-01.eml", '
                                             '"corpus/handmade/benign-de-04.eml", "./emails"]'))
    folder = build_wrong_solution(SEPARATION.wrong_solution("in-the-stack-arabic-indic"), tmp_path / "mine")
    argv = ["--labs-root", str(root), "run", "separation", "--dir", str(folder), "--keep"]
    with kept_lab_run(argv, until="live page:") as (process, out):
        [url] = re.findall(r"live page: (http://\S+)  \(up until Ctrl-C\)", out)
        page.goto(url)
        expect(page.locator("#conn")).to_have_text("live")
        overruled = page.locator(".card", has=page.locator(".rule", has_text="student.not_narrow"),
                                 has_text="your check() passed '٤٤١١'")
        expect(overruled.locator(".tag-student")).to_have_text("student code", timeout=30_000)
        expect(overruled).to_contain_text("your check() passed '٤٤١١'")
        expect(page.locator("#col-actor .card .tag-student").first).to_be_visible()
        page.wait_for_timeout(1300)  # let the arrival highlight fade before the picture
        target = SCREENSHOT if os.environ.get("AIRLOCK_UPDATE_SCREENSHOT") == "1" else tmp_path / "lab-run.png"
        page.screenshot(path=str(target))
        assert target.stat().st_size > 10_000
        page.goto("about:blank")  # off the page first: its reconnect to a stopped stack is a console error
        process.send_signal(signal.SIGINT)
        assert process.wait(60) == 1  # stopped by Ctrl-C; not clean: the kernel overruled the student
