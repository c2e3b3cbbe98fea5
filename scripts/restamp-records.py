#!/usr/bin/env python
"""Re-stamp stored records from one code version to another, changing nothing else.

For a maintainer, after a change that :func:`seps.versioning.version.code_version` counts but that
cannot change a number (a renamed local, a refactor) or after a change to what the
version covers: records made by ``OLD`` code are still the numbers of ``NEW`` code, and
recomputing them would cost hours. Run it once, from the repository root, when every
such change has landed::

    python scripts/restamp-records.py a2365dae12e68f02     # NEW: this checkout's version
    python scripts/restamp-records.py OLD results reports --new NEW --dry-run

Under each PATH (default ``results reports``) it rewrites, where the version is ``OLD``:

- run records (``<matrix>/<run>-<key>-s<seed>.json``): the top-level ``code_version``
  field, and only its bytes (the store writes sorted keys, two-space indent and a final
  newline; a file that would differ anywhere else is refused, not rewritten). Records set
  aside as ``*.stale.json`` stay as they are;
- training folders' markers (``_work/<train key>-s<seed>/code_version``), so that an
  interrupted training resumes rather than being set aside;
- report headers (``Code version: OLD.`` in ``*.md``), as a new report would print them.

Records of any other version are left alone. It prints what it changed, then every
other mention of ``OLD`` that ``git grep`` finds (prose in READMEs: yours to edit).
Not rewritten: the feature cache (its file names hash the version; it is rebuilt).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # this checkout's seps, not another one installed
    sys.path.insert(0, str(ROOT))

from seps.experiments.staleness import WORK_VERSION_FILE  # noqa: E402
from seps.io.store import RECORD_NAME  # noqa: E402
from seps.versioning.version import VERSION_KEY, code_version  # noqa: E402

VERSION = re.compile(r"^[0-9a-f]{16}$")


def restamp_record(text: str, old: str, new: str) -> str | None:
    """``text`` (a record's JSON) with its top-level version ``old`` made ``new``;
    ``None`` when its version is not ``old``.

    Raises:
        ValueError: the field is not where the store writes it (on a line of its own at
            the top level), so that a rewrite could not keep every other byte.
    """
    record = json.loads(text)
    if not isinstance(record, dict) or record.get(VERSION_KEY) != old:
        return None
    line = re.compile(rf'^(  "{VERSION_KEY}": "){old}(",?)$', re.MULTILINE)
    out, n = line.subn(rf"\g<1>{new}\g<2>", text)
    if n != 1 or json.loads(out) != {**record, VERSION_KEY: new}:
        raise ValueError(f"{VERSION_KEY} is not on a top-level line of its own")
    return out


def restamp_header(text: str, old: str, new: str) -> str | None:
    """A report's ``Code version(s): ...`` lines with ``old`` made ``new`` (``None``:
    no such line names ``old``)."""
    line = re.compile(r"^(- )?Code versions?: .*$", re.MULTILINE)
    out = line.sub(lambda m: m.group(0).replace(old, new), text)
    return out if out != text else None


def restamp_tree(folder: Path, old: str, new: str, *, dry_run: bool = False) -> list[str]:
    """Re-stamp everything under ``folder`` (see the module docstring); return one line
    per file changed, or refused (``refused: ...``)."""
    said: list[str] = []
    for path in sorted(Path(folder).rglob("*")):
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8") if path.suffix in (".json", ".md") else None
        try:
            if RECORD_NAME.match(path.name) and text is not None:
                out = restamp_record(text, old, new)
            elif path.suffix == ".md" and text is not None:
                out = restamp_header(text, old, new)
            elif path.name == WORK_VERSION_FILE and path.parent.parent.name == "_work":
                mark = path.read_text(encoding="utf-8")
                out = new + "\n" if mark.strip() == old else None
            else:
                out = None
        except ValueError as exc:
            said.append(f"refused: {path}: {exc}")
            continue
        if out is not None:
            if not dry_run:
                path.write_bytes(out.encode("utf-8"))
            said.append(str(path))
    return said


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", help="the version to replace (16 hex digits)")
    parser.add_argument("--new", help="the version to stamp (default: this code's)")
    parser.add_argument("paths", nargs="*", type=Path, help="folders (default: results reports)")
    parser.add_argument("--dry-run", action="store_true", help="say what would change")
    args = parser.parse_args(argv)
    new = args.new or code_version()
    for v in (args.old, new):
        if not VERSION.match(v):
            parser.error(f"{v!r}: expected 16 hex digits")
    if args.old == new:
        parser.error(f"OLD and NEW are both {new}: nothing to do")
    paths = args.paths or [ROOT / "results", ROOT / "reports"]
    lines = [line for p in paths for line in restamp_tree(p, args.old, new, dry_run=args.dry_run)]
    for line in lines:
        print(line)
    refused = sum(line.startswith("refused: ") for line in lines)
    verb = "would re-stamp" if args.dry_run else "re-stamped"
    print(f"{verb} {len(lines) - refused} file(s) from {args.old} to {new}; {refused} refused")
    if args.dry_run:
        return 1 if refused else 0
    grep = subprocess.run(  # the whole checkout: prose that quotes the version
        ["git", "grep", "-n", "-I", args.old],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    hits = grep.stdout.splitlines()
    records = {ln.split(":", 1)[0] for ln in hits if ln.split(":", 1)[0].endswith(".json")}
    others = [ln for ln in hits if not ln.split(":", 1)[0].endswith(".json")]
    if records:
        print(f"{len(records)} other JSON file(s) still hold {args.old} (outside the paths)")
    if others:
        print(f"other mentions of {args.old} (not changed):", *others, sep="\n  ")
    return 1 if refused else 0


if __name__ == "__main__":
    raise SystemExit(main())
