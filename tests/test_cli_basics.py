import subprocess
import sys

from conftest import run_toolkit

HEAVY = ("numpy", "onnx", "onnxruntime", "tensorrt", "onnx_graphsurgeon")


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
    code = (
        "import sys\n"
        "from toolkit.cli.app import main\n"
        "rc = main(['--help'])\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "HEAVY []" in proc.stdout, proc.stdout + proc.stderr


def test_unknown_command_is_usage_error():
    res = run_toolkit("no-such-command")
    assert res.code == 2
    assert "Traceback" not in res.err
