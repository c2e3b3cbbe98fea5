"""Campaigns: an ordered list of ``seps-bench run`` steps, kept as data.

A campaign file (``ablations/campaigns/<name>.yaml``, shipped in the package, or any path)
names one profile and, in order, the steps that gather a store's records: each step a
matrix, an optional ``--only`` filter over its run ids and the seeds. ``seps-bench
campaign NAME`` runs every step through the command line of ``seps-bench run`` itself
(:func:`step_argv` gives its arguments), so a campaign resumes exactly as a matrix does:
the store skips the runs already done.

This module only reads and checks the file (``yaml.safe_load``; an unknown key, a wrong
type or an unknown matrix is a :class:`CampaignError` of one line naming the file, the
step and what was expected) and builds the arguments; it never imports :mod:`seps.cli`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .ablation_index import packaged_root
from .definition_checks import read_yaml_file, seeds_problem, short

#: The folder of the campaigns shipped with the suite (``ablations/campaigns/``).
CAMPAIGNS = packaged_root() / "campaigns"
#: Keys of a campaign file and of one step (``note`` is for the reader only).
TOP_KEYS = ("profile", "rerun_stale", "report", "steps")
STEP_KEYS = ("matrix", "only", "seeds", "note", "until_decided", "max_seeds")


class CampaignError(ValueError):
    """A campaign file that cannot be used; the message is one line naming the file."""


@dataclass(frozen=True)
class Step:
    """One ``seps-bench run``: ``matrix`` (a name or a matrix file), ``only`` (globs over
    run ids, as ``--only``; ``None``: every run), ``seeds`` (``None``: the profile's);
    ``until_decided``: ``--until-decided`` (the matrix's sequential design chooses seeds
    and runs), with ``max_seeds`` (``--max-seeds``)."""

    matrix: str
    only: str | None = None
    seeds: tuple[int, ...] | None = None
    note: str | None = None
    until_decided: bool = False
    max_seeds: int | None = None

    def label(self) -> str:
        """``matrix [--only ...] [seeds ...]`` for listings."""
        text = self.matrix
        if self.only:
            text += f" --only '{self.only}'"
        if self.seeds is not None:
            text += f" --seeds {','.join(map(str, self.seeds))}"
        if self.until_decided:
            text += " --until-decided"
        if self.max_seeds is not None:
            text += f" --max-seeds {self.max_seeds}"
        return text


@dataclass(frozen=True)
class Campaign:
    """A checked campaign file: its ``name``, ``path``, ``profile``, whether stale records
    are recomputed (``rerun_stale``) and reports written after each step (``report``),
    and its ``steps`` in order."""

    name: str
    path: Path
    profile: str
    steps: tuple[Step, ...]
    rerun_stale: bool = False
    report: bool = False


def list_campaigns() -> list[str]:
    """The names of the campaigns shipped with the package."""
    return sorted(p.stem for p in CAMPAIGNS.glob("*.yaml"))


def campaign_path(name: str) -> Path:
    """``name`` as a shipped campaign, else as a path to a campaign file."""
    shipped = CAMPAIGNS / f"{name}.yaml"
    if "/" not in name and not name.endswith((".yaml", ".yml")):
        if not shipped.is_file():
            known = ", ".join(list_campaigns()) or "none"
            raise CampaignError(f"unknown campaign {name!r}; shipped: {known}; or give a YAML path")
        return shipped
    path = Path(name)
    if path.is_dir():
        raise CampaignError(f"{path}: is a folder; expected a campaign YAML file")
    if not path.is_file():
        raise CampaignError(f"{path}: no such campaign file")
    return path


def _keys(doc: Mapping[str, Any], allowed: Sequence[str], where: str) -> None:
    extra = [str(k) for k in doc if k not in allowed]
    if extra:
        raise CampaignError(
            f"{where}: unknown key {extra[0]!r}; expected one of {', '.join(allowed)}"
        )


def _step(entry: Any, where: str, matrices: Sequence[str] | None) -> Step:
    if not isinstance(entry, Mapping):
        raise CampaignError(f"{where}: expected a mapping with a 'matrix' key, got {short(entry)}")
    _keys(entry, STEP_KEYS, where)
    matrix = entry.get("matrix")
    if not isinstance(matrix, str) or not matrix:
        raise CampaignError(f"{where}: 'matrix': expected a matrix name, got {short(matrix)}")
    is_file = matrix.endswith((".yaml", ".yml"))
    if matrices is not None and not is_file and matrix not in matrices:
        raise CampaignError(
            f"{where}: 'matrix': unknown matrix {matrix!r}; known: {', '.join(matrices)}"
        )
    only = entry.get("only")
    if only is not None and (not isinstance(only, str) or not only.strip()):
        raise CampaignError(f"{where}: 'only': expected comma-separated globs, got {short(only)}")
    seeds = entry.get("seeds")
    if seeds is not None:
        ok = isinstance(seeds, list) and seeds and all(type(s) is int for s in seeds)
        if not ok:
            raise CampaignError(
                f"{where}: 'seeds': expected a list of integers, got {short(seeds)}"
            )
        problem = seeds_problem(seeds)  # negative, too large, or given twice
        if problem:
            raise CampaignError(f"{where}: 'seeds': {problem}")
        seeds = tuple(seeds)
    note = entry.get("note")
    if note is not None and not isinstance(note, str | int | float):
        raise CampaignError(f"{where}: 'note': expected text, got {short(note)}")
    until = entry.get("until_decided", False)
    if not isinstance(until, bool):
        raise CampaignError(f"{where}: 'until_decided': expected true or false, got {until!r}")
    if until and (only is not None or seeds is not None):
        raise CampaignError(
            f"{where}: 'until_decided' chooses the seeds and runs itself; drop 'only' and 'seeds'"
        )
    max_seeds = entry.get("max_seeds")
    if max_seeds is not None and (type(max_seeds) is not int or max_seeds < 1 or not until):
        raise CampaignError(
            f"{where}: 'max_seeds': expected a positive integer with 'until_decided: true', "
            f"got {max_seeds!r}"
        )
    return Step(matrix, only, seeds, None if note is None else str(note), until, max_seeds)


def load_campaign(name: str, matrices: Sequence[str] | None = None) -> Campaign:
    """Read and check the campaign ``name`` (:func:`campaign_path`); step matrices must be
    among ``matrices`` (or matrix files) when given."""
    path = campaign_path(name)
    doc = read_yaml_file(
        path, CampaignError
    )  # one line per fault (seps.experiments.definition_checks)
    if not isinstance(doc, Mapping):
        raise CampaignError(f"{path}: expected a mapping with 'profile' and 'steps'")
    _keys(doc, TOP_KEYS, str(path))
    profile = doc.get("profile")
    if not isinstance(profile, str) or not profile:
        raise CampaignError(f"{path}: 'profile': expected a profile name, got {short(profile)}")
    for flag in ("rerun_stale", "report"):
        if not isinstance(doc.get(flag, False), bool):
            raise CampaignError(f"{path}: {flag!r}: expected true or false, got {short(doc[flag])}")
    steps = doc.get("steps")
    if not isinstance(steps, list) or not steps:
        raise CampaignError(f"{path}: 'steps': expected a non-empty list of steps")
    checked = tuple(_step(e, f"{path}: steps[{i}]", matrices) for i, e in enumerate(steps))
    return Campaign(
        path.stem if path.parent == CAMPAIGNS else str(path),
        path,
        profile,
        checked,
        bool(doc.get("rerun_stale", False)),
        bool(doc.get("report", False)),
    )


def step_argv(
    campaign: Campaign, step: Step, results: str, reports: str, extra: Sequence[str] = ()
) -> list[str]:
    """The arguments of ``seps-bench run`` (without the command name) for ``step``."""
    argv = [step.matrix, "--profile", campaign.profile, "--results", results]
    if step.only:  # one word when it starts with '-', which argparse would take for an option
        argv += [f"--only={step.only}"] if step.only.startswith("-") else ["--only", step.only]
    if step.seeds is not None:
        argv += ["--seeds", ",".join(map(str, step.seeds))]
    if step.until_decided:
        argv.append("--until-decided")
    if step.max_seeds is not None:
        argv += ["--max-seeds", str(step.max_seeds)]
    argv += ["--reports", reports] if campaign.report else ["--no-report"]
    if campaign.rerun_stale:
        argv.append("--rerun-stale")
    return argv + list(extra)


__all__ = [
    "CAMPAIGNS",
    "Campaign",
    "CampaignError",
    "Step",
    "campaign_path",
    "list_campaigns",
    "load_campaign",
    "step_argv",
]
