"""The command line loads a command's code only when that command is used, and importing
the package changes nothing (seps.cli.registry, seps/__init__.py, seps.runtime.float_path)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from seps.cli import COMMANDS, build_parser
from seps.runtime.float_path import ENV_VAR, FLOAT_PATHS

HEAVY = ("torch", "transformers", "timm", "seps.train", "seps.runs.runner")


def _in_fresh_python(code: str, env: dict[str, str] | None = None) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _loaded(*names: str) -> str:
    """Python code: the dict {module name: whether it is imported}."""
    return f"{{m: m in sys.modules for m in {list(names)!r}}}"


def test_importing_the_cli_and_building_the_run_parser_does_not_import_torch():
    code = (
        "import json, sys, contextlib, io\n"
        "import seps.cli\n"
        "parser = seps.cli.build_parser(['run'])\n"
        "parser.parse_args(['run', 'seven-differences', '--profile', 'smoke'])\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    seps.cli.main(['--help'])\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    seps.cli.main(['run', '--help'])\n"
        f"print(json.dumps({_loaded(*HEAVY)}))"
    )
    assert _in_fresh_python(code) == dict.fromkeys(HEAVY, False)


def test_import_seps_loads_nothing_heavy_until_a_name_is_used():
    code = (
        "import json, sys, seps\n"
        f"before = {_loaded(*HEAVY)}\n"
        "seps.get_config('code'), seps.SEPSHead\n"
        f"print(json.dumps([before, {_loaded('torch')}]))"
    )
    before, after = _in_fresh_python(code)
    assert before == dict.fromkeys(HEAVY, False) and after == {"torch": True}


def test_import_seps_leaves_the_environment_unchanged():
    names = [ENV_VAR, *FLOAT_PATHS["portable"]]
    clean = {k: v for k, v in os.environ.items() if k not in names}
    code = (
        "import json, os\n"
        "before = dict(os.environ)\n"
        "import seps, seps.cli, seps.core.config, seps.runtime.float_path\n"
        "print(json.dumps(dict(os.environ) == before))"
    )
    assert _in_fresh_python(code, env=clean) is True


_PIN_NAMES = [ENV_VAR, *FLOAT_PATHS["portable"]]


def _pins_after_main(argv: list[str], **extra_env: str) -> dict:
    """The float-path variables after ``seps.cli.main(argv)`` in a fresh Python whose
    environment has none of them (plus ``extra_env``); a ``SystemExit`` (``--help``) is
    swallowed."""
    clean = {k: v for k, v in os.environ.items() if k not in _PIN_NAMES}
    code = (
        "import json, os\n"
        "from seps.cli import main\n"
        f"try:\n    main({argv!r})\n"
        "except SystemExit:\n    pass\n"
        f"print(json.dumps({{k: os.environ.get(k) for k in {_PIN_NAMES!r}}}))"
    )
    return _in_fresh_python(code, env={**clean, **extra_env})


def test_a_command_line_run_pins_the_float_path_before_the_command_loads(monkeypatch):
    """What ``seps-bench`` does first thing: the variables are in the environment that
    the command's module (and torch, which reads them when it loads) sees."""
    got = _pins_after_main(["presets", "code"])
    from seps.runtime.float_path import default_path

    # default_path here would say native: this test process has imported torch.
    expected = default_path(torch_imported=False)
    assert got == {ENV_VAR: expected, **FLOAT_PATHS[expected]}


def test_bench_runs_on_the_native_float_path_unless_asked_otherwise():
    """A speed benchmark writes no record: it times the machine's own kernels, not MKL's
    portable SSE2 branch; an explicit SEPS_FLOAT_PATH still wins."""
    got = _pins_after_main(["bench", "--help"])
    assert got[ENV_VAR] == "native" and all(got[k] is None for k in FLOAT_PATHS["portable"])
    asked = _pins_after_main(["bench", "--help"], **{ENV_VAR: "portable"})
    assert asked == {ENV_VAR: "portable", **FLOAT_PATHS["portable"]}


def test_each_command_imports_only_its_own_module():
    parser = build_parser(["presets"])
    args = parser.parse_args(["presets"])
    assert args._run.__module__ == COMMANDS["presets"].module


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_listed_command_has_a_module_with_its_two_functions(name):
    from seps.cli.registry import load

    add_arguments, run = load(name)
    assert callable(add_arguments) and callable(run)


def test_records_say_which_float_path_ran_whether_or_not_the_library_user_pinned():
    """A program that imports seps and never pins runs natively, and the CPU stamp of
    its records says so; after seps.runtime.float_path.pin() it says portable."""
    names = [ENV_VAR, *FLOAT_PATHS["portable"]]
    clean = {k: v for k, v in os.environ.items() if k not in names}
    code = (
        "import json, sys\n"
        "import seps.runtime.float_path\n"
        "if sys.argv[1:] == ['pin']:\n"
        "    seps.runtime.float_path.pin()\n"
        "from seps.experiments.provenance import cpu_identity, float_path_key\n"
        "print(json.dumps([cpu_identity()['overrides'], float_path_key(cpu_identity())[0]]))"
    )
    run = [sys.executable, "-c", code]
    native = json.loads(subprocess.run(run, env=clean, capture_output=True, text=True).stdout)
    pinned = json.loads(
        subprocess.run([*run, "pin"], env=clean, capture_output=True, text=True).stdout
    )
    assert native == [{}, "native"]
    assert pinned == [{ENV_VAR: "portable", **FLOAT_PATHS["portable"]}, "pinned"]


#: Commands whose options are read from torch-backed definitions (TrainConfig's fields,
#: the kernel registry): their `--help` loads torch. Every other command's must not.
HELP_NEEDS_TORCH = {"train", "eval", "ratio-scale", "bench"}


@pytest.mark.parametrize("name", sorted(set(COMMANDS) - HELP_NEEDS_TORCH))
def test_a_commands_help_loads_no_torch(name):
    code = (
        "import json, sys, contextlib, io\n"
        "import seps.cli\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        f"    seps.cli.main([{name!r}, '--help'])\n"
        f"print(json.dumps({_loaded(*HEAVY, 'pandas', 'matplotlib')}))"
    )
    loaded = _in_fresh_python(code)
    assert not any(loaded.values()), {m: v for m, v in loaded.items() if v}
