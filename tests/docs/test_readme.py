"""The README's set-up commands stay true: CI runs exactly the README's test command."""

import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _setup_commands():
    text = open(os.path.join(REPO, "README.md")).read()
    block = re.search(r"## Set-up: two commands.*?```bash\n(.*?)```", text, re.S).group(1)
    return [l for l in block.splitlines() if l.strip() and not l.startswith("#")]


def test_readme_has_two_setup_commands():
    assert len(_setup_commands()) == 2


def test_ci_runs_the_readme_test_command():
    test_cmd = _setup_commands()[1]
    ci = open(os.path.join(REPO, ".ci", "run")).read()
    assert test_cmd in ci.splitlines()


def test_main_job_script_exists():
    main_cmd = _setup_commands()[0]
    script = re.search(r"python (\S+\.py)", main_cmd).group(1)
    assert os.path.exists(os.path.join(REPO, script))


def test_both_commands_use_the_virtual_environment_ci_creates():
    """A system Python that refuses pip (Debian's externally-managed-environment) is never used."""
    first, second = _setup_commands()
    assert first.startswith("python3 -m venv .venv && . .venv/bin/activate && pip install . && ")
    assert second.startswith(". .venv/bin/activate && pip install -e ")
    ci = open(os.path.join(REPO, ".ci", "run")).read().splitlines()
    assert "python3 -m venv .venv" in ci and ci.index("python3 -m venv .venv") < ci.index(second)
