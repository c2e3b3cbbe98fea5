"""The command line's surface: every subcommand's options, as committed.

``tests/data/cli_options.json`` holds, for ``seps-bench`` and each subcommand, every
option's flags, destination, default, choices, nargs, type and whether it is required
(help texts may be reworded; what a user types and gets may not). A restructure must
leave it unchanged; a deliberate change of the interface regenerates it with
``python tests/test_cli_options.py`` and shows up in review as a diff of that file.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from seps.cli import main

SNAPSHOT = Path(__file__).with_name("data") / "cli_options.json"


def _default(a: argparse.Action) -> str:
    # ``bench --device`` defaults to this machine's device: the same on every machine
    # as a rule, not as a value.
    if a.dest == "device" and a.default in ("cpu", "cuda"):
        return "'cuda' if torch.cuda.is_available() else 'cpu'"
    return repr(a.default)


def _options(parser: argparse.ArgumentParser) -> list[dict[str, object]]:
    out = []
    for a in parser._actions:
        if isinstance(a, (argparse._SubParsersAction, argparse._HelpAction)):
            continue
        out.append(
            {
                "flags": list(a.option_strings) or [a.dest],
                "dest": a.dest,
                "default": _default(a),
                "choices": None if a.choices is None else [str(c) for c in a.choices],
                "nargs": repr(a.nargs),
                "required": bool(a.required),
                "type": getattr(a.type, "__name__", None),
            }
        )
    return out


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            return dict(a.choices)
    return {}


def parsers() -> dict[str, argparse.ArgumentParser]:
    """``seps-bench`` and every (sub)subcommand's parser, by the words that call it."""
    from seps.cli import build_parser

    top = build_parser()
    out = {"seps-bench": top}
    stack = [(f"seps-bench {n}", p) for n, p in _subparsers(top).items()]
    while stack:
        name, p = stack.pop()
        out[name] = p
        stack += [(f"{name} {n}", q) for n, q in _subparsers(p).items()]
    return dict(sorted(out.items()))


def surface() -> dict[str, list[dict[str, object]]]:
    """``{"seps-bench": [...], "seps-bench run": [...], "seps-bench data synth": [...]}``."""
    return {name: _options(p) for name, p in parsers().items()}


def test_every_subcommand_keeps_its_options():
    assert SNAPSHOT.exists(), "run: python tests/test_cli_options.py"
    assert surface() == json.loads(SNAPSHOT.read_text())


def test_every_option_of_every_subcommand_has_a_help_text():
    bare = [
        f"{name} {a.option_strings[0]}"
        for name, p in parsers().items()
        for a in p._actions
        if a.option_strings and not (a.help or "").strip()
    ]
    assert bare == [], "options without --help text"


if __name__ == "__main__":
    SNAPSHOT.write_text(json.dumps(surface(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {SNAPSHOT}")


@pytest.mark.parametrize(
    ("argv", "prog", "named"),
    [
        (["run", "regime", "--seeds", "a,b"], "seps-bench run", "--seeds"),
        (["export", "--format", "xml"], "seps-bench export", "--format"),
        (["report", "--bogus"], "seps-bench report", "--bogus"),
        (["nosuch"], "seps-bench", "nosuch"),
    ],
)
def test_a_usage_error_is_one_line_naming_the_option_and_where_the_help_is(
    argv, prog, named, capsys
):
    with pytest.raises(SystemExit) as exited:  # argparse exits, as `seps-bench` does
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"{prog}: error: ") and named in err
    assert err.endswith(f"(see `{prog} --help`)")
