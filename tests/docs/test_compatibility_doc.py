"""docs/compatibility.md stays true: it names every option of Polygraphy's five commands, and
every option it marks 'not supported' is refused with advice (exit 2), never 'No such option'."""

import os
import re
import shutil
import subprocess

import pytest

from conftest import REPO

DOC = os.path.join(REPO, "docs", "compatibility.md")
SECTIONS = {
    "run": ("run",),
    "inspect model": ("inspect", "model"),
    "inspect data": ("inspect", "data"),
    "surgeon extract": ("surgeon", "extract"),
    "surgeon sanitize": ("surgeon", "sanitize"),
    "debug reduce": ("debug", "reduce"),
}
OPTION = re.compile(r"`(--?[a-zA-Z][-\w]*)")


def _sections():
    text = open(DOC).read()
    parts = re.split(r"^## `([^`]+)`\s*$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2])), text


def _rows(body):
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[1] in ("supported", "differently", "not supported"):
            yield OPTION.findall(cells[0]), cells[1]


def _polygraphy_options(path):
    exe = shutil.which("polygraphy")
    if exe is None:
        pytest.skip("polygraphy (a test dependency) is not installed")
    out = subprocess.run([exe, *path, "--help"], capture_output=True, text=True, timeout=120).stdout
    opts = set()
    for line in out.splitlines():
        m = re.match(r"^  (-[-\w].*)$", line)  # option lines; their continuations are indented further
        if m:
            opts.update(re.findall(r"(?<![\w-])(--?[a-zA-Z][-\w]*)", m.group(1).split("  ")[0]))
    return opts - {"-h", "--help"}


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_every_polygraphy_option_is_in_the_table(section):
    sections, text = _sections()
    common = {o for opts, _ in _rows(text.split("## `run`")[0]) for o in opts}
    named = {o for opts, _ in _rows(sections[section]) for o in opts} | common
    missing = sorted(_polygraphy_options(SECTIONS[section]) - named)
    assert not missing, f"{section}: Polygraphy options not in docs/compatibility.md: {missing}"


def _options_with(statuses):
    """(section, option) for every option of the five commands' tables with one of ``statuses``."""
    sections, _ = _sections()
    for section, body in sections.items():
        if section not in SECTIONS:
            continue
        for opts, status in _rows(body):
            if status in statuses:
                for opt in opts:
                    yield section, opt


def _refused():
    return _options_with(("not supported",))


@pytest.mark.parametrize("section,option", list(_refused()), ids=lambda v: v if isinstance(v, str) else None)
def test_refused_options_get_advice(cli, section, option):
    res = cli(*SECTIONS[section], "model.onnx", option, "x")
    ok = res.code == 2 and "No such option" not in res.err and option in res.err and "not supported" in res.err
    assert ok, (
        f"docs/compatibility.md marks {option} 'not supported' for {section}, but toolkit now answers "
        f"{res.err.strip()!r} (exit {res.code}): if the option is supported now, move it to a supported row; "
        "else give it advice in toolkit/cli/unsupported.py UNSUPPORTED_OPTIONS"
    )


def _accepted():
    return _options_with(("supported", "differently"))


@pytest.mark.parametrize("section,option", list(_accepted()), ids=lambda v: v if isinstance(v, str) else None)
def test_supported_options_exist(section, option):
    from toolkit.cli.app import get_command
    from toolkit.cli.options import take_common_options

    if take_common_options([option, "info"])[0] != [option, "info"]:
        return  # a common option, taken before the command parses
    cmd = get_command()
    for part in SECTIONS[section]:
        cmd = cmd.commands[part]
    known = {o for p in cmd.params for o in getattr(p, "opts", ())} | {"-h", "--help"}
    assert option in known, (
        f"docs/compatibility.md says {section} supports {option}, but it has no such option: mark its row "
        "'not supported' (with advice in toolkit/cli/unsupported.py UNSUPPORTED_OPTIONS) or add the option"
    )
