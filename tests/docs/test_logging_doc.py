"""docs/logging.md names every command, and every command takes the options it lists."""

from __future__ import annotations

import os
import re

import typer

from conftest import REPO


def _commands():
    from toolkit.cli.app import app

    def walk(cmd, prefix: str):
        subs = getattr(cmd, "commands", None)
        if not subs:
            yield prefix, cmd
            return
        for name, sub in subs.items():
            yield from walk(sub, f"{prefix} {name}".strip())

    return dict(walk(typer.main.get_command(app), ""))


def test_the_list_names_every_command_and_each_takes_the_options():
    text = open(os.path.join(REPO, "docs", "logging.md")).read()
    listed = re.search(r"Every command \((.*?)\) takes these options", text, re.S).group(1)
    named = {" ".join(n.split()) for n in re.findall(r"`([^`]+)`", listed)}
    commands = _commands()
    assert named == set(commands)
    for name, cmd in commands.items():
        flags = {opt for p in cmd.params for opt in (p.opts or [])}
        assert {"-v", "-q", "--log-file"} <= flags, name
