from conftest import modules_loaded_by, run_toolkit

HEAVY = ("numpy", "onnx", "onnxruntime", "tensorrt", "onnx_graphsurgeon", "ray")


def test_help_lists_command_groups():
    res = run_toolkit("--help")
    assert res.code == 0
    for group in ("run", "inspect", "surgeon", "data", "debug"):
        assert group in res.out


def test_version():
    import toolkit

    res = run_toolkit("--version")
    assert res.code == 0
    assert toolkit.__version__ in res.out


def test_help_imports_nothing_heavy():
    assert modules_loaded_by("", ["--help"], HEAVY) == []


def test_root_help_names_every_registered_backend():
    """Every runner kind the registry holds is named in `toolkit --help`, in the root help and in
    `run`'s line, without the registry being imported for it (BACKENDS is the root's list)."""
    import toolkit.run.registry as registry
    from toolkit.cli.app import BACKENDS

    titles = [kind.panel for kind in registry.KINDS.values()]
    assert list(BACKENDS) == titles, "toolkit/cli/app.py's BACKENDS must list every registered runner kind"
    res = run_toolkit("--help", env={"COLUMNS": "300"})
    assert res.code == 0
    text = " ".join(res.out.split())
    head, commands = text.split("Commands:")
    run_line = commands.split(" inspect ")[0]
    for title in titles:
        assert title in head and title in run_line, f"the root help does not name {title}"
    assert modules_loaded_by("", ["--help"], ("toolkit.run.registry", "toolkit.backends")) == []


def test_unknown_command_is_usage_error():
    res = run_toolkit("no-such-command")
    assert res.code == 2
    assert "Traceback" not in res.err


def test_root_help_lists_groups_without_loading_them():
    groups = tuple(f"toolkit.cli.{g}" for g in ("run", "inspect", "surgeon", "data", "debug"))
    assert modules_loaded_by("", ["--help"], groups) == []


def test_registry_short_help_matches_each_group():
    import re

    from toolkit.cli.app import GROUPS, get_command

    full = get_command()
    for name, (_mod, _attr, short) in GROUPS.items():
        words = lambda text: re.findall(r"[\w'/()-]+", text or "")
        assert words(full.commands[name].help)[: len(words(short))] == words(short), name


def test_lazy_root_runs_every_group():
    for group in ("run", "inspect", "surgeon", "data", "debug"):
        res = run_toolkit(group, "--help")
        assert res.code == 0, (group, res.err)
        assert f"Usage: toolkit {group}" in res.out
