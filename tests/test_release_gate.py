"""One release gate: the profile that establishes every gated check (``release``) is the one that the profiles'
descriptions, --help, the README, the options page and the summary line call the release gate; the summary line counts
the gated checks established."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path

from conformance.report import render
from conformance.targets.profiles import PROFILE_NAMES, RELEASE_PROFILE, load_profiles, profile_role
from tests.sample_results import sample_results

REPO = Path(__file__).resolve().parents[1]


def test_only_the_release_profile_is_called_the_release_gate():
    profiles = load_profiles()
    assert RELEASE_PROFILE == "release" and RELEASE_PROFILE in PROFILE_NAMES
    called = [name for name, p in profiles.items() if re.search(r"(?<!not )the release gate", p.description)]
    assert called == [RELEASE_PROFILE], {name: p.description for name, p in profiles.items()}
    assert profile_role("release") == "the release gate"
    assert all(profile_role(name).startswith("not the release gate") for name in PROFILE_NAMES if name != "release")


def test_readme_and_options_name_the_same_release_gate():
    readme = (REPO / "README.md").read_text()
    options = (REPO / "docs" / "options.md").read_text()
    assert "`--profile release`, the release gate" in readme
    assert not re.search(r"default profile[^.]{0,3}\(?the release gate", readme)
    assert "`release` is the release gate" in options and "`default` is the release gate" not in options


def test_help_says_which_profile_is_the_release_gate():
    done = subprocess.run([sys.executable, "-m", "pytest", "--help"], cwd=REPO, capture_output=True, text=True)
    text = " ".join(done.stdout.split())
    assert done.returncode == 0 and "release is the release gate (every gated check established)" in text


def test_the_summary_line_names_the_gate_and_counts_the_established_checks():
    sample = sample_results()
    counts = render.check_counts(sample)
    assert counts["PASS*"] >= 1
    line = render.verdict_line(sample)
    assert f"profile={sample['settings']['profile']} (not the release gate, which is --profile release)" in line
    assert (f"{counts['PASS'] + counts['PASS*']} passed ({counts['PASS']} established, {counts['PASS*']} not "
            "established)") in line
    release = copy.deepcopy(sample)
    release["settings"]["profile"] = "release"
    assert "profile=release (the release gate)" in render.verdict_line(release)
    assert "profile: release (the release gate)" in render.terminal(release, width=200)


def test_a_release_run_with_other_sample_counts_is_not_the_release_gate():
    release = sample_results()
    release["settings"].update(profile="release", samples={"widedeep": 8})
    assert "profile=release (not the release gate: --samples replaced its counts)" in render.verdict_line(release)
