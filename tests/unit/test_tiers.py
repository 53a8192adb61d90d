"""The test tiers hold: every test outside tests/unit carries its folder's marker, so `-m`
selects a tier whole, and the hypothesis profiles are registered and picked as documented."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import settings as hypothesis_settings

from tests.conftest import DEEP_EXAMPLES, QUICK_EXAMPLES, ROOT, TIER_FOLDERS

# A pytest plugin for the collecting child: every collected test's node id and its markers.
RECORDER = '''
import json, os

def pytest_collection_finish(session):
    with open(os.environ["TIERS_OUT"], "w") as out:
        json.dump({item.nodeid: sorted({m.name for m in item.iter_markers()}) for item in session.items}, out)
'''


def collected_markers(tmp_path: Path, *args: str) -> dict[str, list[str]]:
    (tmp_path / "tiers_recorder.py").write_text(RECORDER)
    out = tmp_path / "collected.json"
    env = {**os.environ, "TIERS_OUT": str(out), "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
           "AIRLOCK_REQUIRE_BROWSER": ""}  # a missing browser skips its modules, never fails collection
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-p", "tiers_recorder", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(out.read_text())


def test_every_test_outside_unit_carries_its_folders_marker(tmp_path: Path) -> None:
    """Every test collected under tests/<tier>/ has the <tier> marker, the one `-m` selects by
    (a `pytestmark` in a conftest.py, which pytest ignores, left a third of them unmarked)."""
    tiers = sorted(TIER_FOLDERS)
    collected = collected_markers(tmp_path, *(f"tests/{folder}" for folder in tiers))
    by_folder = {folder: [n for n in collected if n.split("/")[1] == folder] for folder in tiers}
    assert all(by_folder[folder] for folder in tiers if folder != "browser"), by_folder  # browser may skip whole
    wrong = {nodeid: f"no {nodeid.split('/')[1]!r} marker (has {markers})"
             for nodeid, markers in collected.items() if nodeid.split("/")[1] not in markers}
    assert wrong == {}


def test_the_quick_profile_is_the_default_and_ci_picks_deep() -> None:
    """The conftest loads the quick profile unless HYPOTHESIS_PROFILE names another (.ci/run
    sets deep); deep draws four times as many examples, and examples() follows the profile."""
    show = ("import tests.conftest as c; from hypothesis import settings as s; "
            "print(s.get_current_profile_name(), s.default.max_examples, c.examples(10_000))")
    loaded = {}
    for chosen in ("", "deep"):
        env = {key: value for key, value in os.environ.items() if key != "HYPOTHESIS_PROFILE"}
        env |= {"HYPOTHESIS_PROFILE": chosen} if chosen else {}
        done = subprocess.run([sys.executable, "-c", show], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, done.stderr
        loaded[chosen] = done.stdout.split()
    assert loaded == {"": ["quick", str(QUICK_EXAMPLES), str(10_000 * QUICK_EXAMPLES // DEEP_EXAMPLES)],
                      "deep": ["deep", str(DEEP_EXAMPLES), "10000"]}
    assert DEEP_EXAMPLES == 4 * QUICK_EXAMPLES
    assert hypothesis_settings.get_profile("deep").deadline is None is hypothesis_settings.get_profile("quick").deadline
