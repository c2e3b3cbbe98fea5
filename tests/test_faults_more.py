"""Faults of issue 77 item 4: each is one line naming the file, field or option and what
was expected, found before anything trains, leaving no record or lock behind.

Definitions malformed in new ways (YAML alias bombs, non-UTF-8 bytes, folders, wrong
types everywhere, run ids whose records would collide, a campaign's later step, the
report's own definitions), option values (a store that is a file or a link loop),
degenerate data in the official layout, damaged files the runner reuses (a training
folder's marker, lock files, temporary files of dead or foreign writers, the sequential
log), and several writers on one store (slow: two runs, a campaign and readers at once,
whose records equal one process's bits).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ablation_roots import make_ablation_root

import seps.train as trainer
from seps.cli import main
from seps.experiments.definition_checks import MAX_RUN_ID, read_yaml_file
from seps.experiments.definitions import AblationError, load_matrix, load_profile
from seps.experiments.staleness import claim_work_dir, reusable_work_dir, work_dir_version
from seps.io.store import (
    FOREIGN_TEMP_AGE,
    clean_stale_temps,
    host_tag,
    pid_alive,
    temp_path,
)
from seps.report.sequential import DesignError, load_designs

PROFILE = """
tiny:
  description: test-sized
  seeds: [0]
  head: {embed_size: 32}
  train: {synth_images: 60, image_size: 32, epochs: 1, batch_size: 8, max_steps_per_epoch: 2,
          val_images: 0, backbone_lr_mult: 1.0, vocab_size: 300, max_dense_words: 48}
"""
MATRIX = """name: mini
baseline: code
runs:
  - {id: code, preset: code}
  - {id: laps, preset: laps}
"""
BOMB = "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 10) if p else ', '.join('x' * 10)}]\n"
    for p, n in zip(["", *"abcdefgh"], "abcdefghi", strict=True)
)


class TrainingStarted(BaseException):
    """Raised by a stand-in trainer: reaching it means nothing refused the fault first."""


@pytest.fixture()
def root(tmp_path):
    return make_ablation_root(tmp_path / "ablations", {"mini": MATRIX}, profiles=PROFILE)


@pytest.fixture()
def no_training(monkeypatch):
    def train(*args, **kwargs):
        raise TrainingStarted

    monkeypatch.setattr(trainer, "train", train)


def _one_line(capsys, code, *names):
    """The command exited 2 with one line on stderr (no traceback) naming each of ``names``."""
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for name in names:
        assert name in err, err
    return err


def _run(root, tmp_path, *extra):
    return ["run", "mini", "--ablations", str(root), "--profile", "tiny", "--device", "cpu",
            "--results", str(tmp_path / "results"), "--reports", str(tmp_path / "reports"),
            "--no-progress", *extra]  # fmt: skip


# ------------------------------------------------------------------ definition files
def test_a_yaml_alias_bomb_is_refused_at_once_without_expanding_it(root, tmp_path, capsys):
    (root / "matrices" / "mini.yaml").write_text(BOMB + "runs:\n  - {id: a, sections: *i}\n")
    (tmp_path / "camp.yaml").write_text(BOMB + "profile: tiny\nsteps: [{matrix: mini}]\n")
    started = time.perf_counter()
    for argv in (
        _run(root, tmp_path, "--dry-run"),
        ["campaign", str(tmp_path / "camp.yaml"), "--ablations", str(root), "--dry-run"],
    ):
        _one_line(capsys, main(argv), "expands to more than", "YAML aliases")
    (root / "profiles.yaml").write_text(BOMB + "tiny: {seeds: *i}\n")
    with pytest.raises(AblationError, match=r"profiles\.yaml: expands to more than"):
        load_profile("tiny", root)
    assert time.perf_counter() - started < 20  # a billion values were never built


def test_a_document_that_contains_itself_is_refused(tmp_path):
    path = tmp_path / "self.yaml"
    path.write_text("a: &a [1, *a]\n")
    with pytest.raises(ValueError, match=r"self\.yaml: expands to more than"):
        read_yaml_file(path)


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"runs:\n  - {id: \xff\xfe, preset: code}\n", "not UTF-8 text (byte 0xff at offset 15)"),
        (None, "is a folder; expected a YAML file"),
        (b"", "expected a mapping with a 'runs' list"),
        (b"- {id: code}\n", "expected a mapping with a 'runs' list"),
    ],
)
def test_a_matrix_file_not_utf8_a_folder_empty_or_a_list_is_one_line(
    root, tmp_path, capsys, no_training, content, said
):
    path = root / "matrices" / "mini.yaml"
    path.unlink()
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    _one_line(capsys, main(_run(root, tmp_path, "--data-path", str(tmp_path))), str(path), said)
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    ("runs", "said"),
    [
        ("runs: []", "field 'runs': no run"),
        ("runs:\n  - {id: null, preset: code}", "field 'id': expected a run id"),
        ("runs:\n  - {id: [a, b], preset: code}", "field 'id': expected a run id"),
        ("runs:\n  - {id: '', preset: code}", "field 'id': expected a run id"),
        ("runs:\n  - {id: a, preset: [code]}", "field 'preset': expected a string"),
        ("runs:\n  - {id: a, preset: code, difference: [x]}", "field 'difference': expected"),
        ("runs:\n  - {id: a, preset: code, set: {1: 2}}", "1 is not a field name"),
        ("runs:\n  - {id: a, preset: code, train: {synth_images: 0}}", "'synth_images'"),
        ("runs:\n  - {id: a, preset: code, train: {lr: .inf}}", "'lr': invalid value inf"),
        ("runs:\n  - {id: a, preset: code, train: {epochs: 0}}", "run 'a': train config"),
        ("runs:\n  - {grid: {1: [a, b]}}", "field 'grid': 1 is not a field name"),
        ("runs:\n  - {grid: {preset: [[code]]}}", "grid field 'preset': expected preset names"),
        ("runs:\n  - {grid: {embed_size: [32]}, id: [x]}", "field 'id': expected a template"),
        ("runs:\n  - {expand: flip, from: code, to: paper, over: [x]}", "field 'over'"),
        ("baselin: a\nruns:\n  - {id: a, preset: code}", "unknown field(s) ['baselin']"),
        ("description: [a]\nruns:\n  - {id: a, preset: code}", "field 'description'"),
        ("runs:\n  - {id: 'a b', preset: code}\n  - {id: a_b, preset: laps}", "both store"),
        (f"runs:\n  - {{id: {'x' * (MAX_RUN_ID + 1)}, preset: code}}", "run id of 151"),
    ],
)
def test_a_malformed_matrix_is_one_line_naming_file_run_and_field(tmp_path, runs, said):
    root = make_ablation_root(tmp_path / "ablations", {"m": runs + "\n"}, profiles=PROFILE)
    with pytest.raises(AblationError) as err:
        load_matrix("m", root)
    assert said in str(err.value) and "m.yaml" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ("tiny: 5", "expected a mapping of summary, description, seeds, head, train, got 5"),
        ("tiny:", "expected a mapping of summary"),
        ("tiny: {train: [1]}", "field 'train': expected a mapping"),
        ("tiny: {head: [embed_size]}", "field 'head': expected a mapping"),
        ("tiny: {head: {embed_size: -1}}", "config field 'embed_size': invalid value -1"),
        ("tiny: {train: {max_steps_per_epoch: -1}}", "'max_steps_per_epoch': invalid value -1"),
        ("tiny: {train: {synth_images: -5}}", "'synth_images': invalid value -5"),
        ("tiny: {train: {vocab_size: -1}}", "'vocab_size': invalid value -1"),
        ("tiny: {train: {batch_size: 0}}", "'batch_size': invalid value 0"),
        ("tiny: {seeds: [0, -1]}", "field 'seeds': -1 is outside"),
        ("tiny: {description: [a]}", "field 'description': expected text"),
    ],
)
def test_a_malformed_profile_is_one_line_naming_file_profile_and_field(tmp_path, entry, said):
    root = make_ablation_root(tmp_path / "ablations", {"m": MATRIX}, profiles=entry + "\n")
    with pytest.raises(AblationError) as err:
        load_profile("tiny", root)
    text = str(err.value)
    assert said in text and "profiles.yaml: profile 'tiny'" in text and "\n" not in text


@pytest.mark.parametrize(
    ("option", "said"),
    [
        (["--set", "train.synth_images=0"], "--set train.synth_images=0"),
        (["--set", "train.max_steps_per_epoch=-3"], "'max_steps_per_epoch': invalid value -3"),
        (["--set", "train.lr=.inf"], "'lr': invalid value inf"),
        (["--seeds", "0,,1"], "an empty seed between commas"),
    ],
)
def test_set_and_seeds_values_no_run_can_use_are_refused(root, tmp_path, capsys, option, said):
    try:
        code = main(_run(root, tmp_path, "--dry-run", *option))
    except SystemExit as exc:  # argparse's own one-line error
        code = exc.code
    _one_line(capsys, code, said)


@pytest.mark.parametrize(
    ("option", "said"),
    [
        (["--lr", "inf"], "'lr': invalid value inf"),
        (["--max-steps-per-epoch", "-1"], "'max_steps_per_epoch': invalid value -1"),
        (["--synth-images", "0"], "'synth_images': invalid value 0"),
    ],
)
def test_train_refuses_values_no_run_can_use_before_it_trains(
    tmp_path, capsys, monkeypatch, option, said
):
    import seps.train.loop

    monkeypatch.setattr(seps.train.loop, "train", lambda *a, **k: pytest.fail("it trained"))
    argv = ["train", "--run-dir", str(tmp_path / "r"), "--data-path", str(tmp_path / "d")]
    _one_line(capsys, main([*argv, *option]), said)
    assert not (tmp_path / "d").exists()


# ------------------------------------------------------------------------ campaigns
STEP1 = "profile: tiny\nsteps:\n  - {matrix: mini, only: laps, seeds: [0]}\n"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (STEP1 + "  - {matrix: bad}\n", "steps[1] (bad)"),
        (STEP1 + "  - {matrix: mini, only: zzz}\n", "--only: 'zzz' matches no run id"),
        (STEP1 + "  - {matrix: mini, seeds: [-1]}\n", "'seeds': -1 is outside"),
        (STEP1 + "  - {matrix: mini, seeds: [0, 0]}\n", "'seeds': seed 0 is given twice"),
        (STEP1 + "  - {matrix: /no/such.yaml}\n", "matrix file not found"),
        (STEP1.replace("tiny", "nosuch"), "unknown profile 'nosuch'"),
        (b"profile: \xff\n", "not UTF-8 text"),
    ],
)
def test_a_campaign_is_checked_whole_before_its_first_step_trains(
    root, tmp_path, capsys, no_training, text, said
):
    (root / "matrices" / "bad.yaml").write_text("runs:\n  - {id: a, preset: nosuch}\n")
    path = tmp_path / "camp.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    argv = ["campaign", str(path), "--ablations", str(root), "--results",
            str(tmp_path / "results"), "--no-progress"]  # fmt: skip
    _one_line(capsys, main(argv), said)  # exit 2, and TrainingStarted was never raised
    assert not (tmp_path / "results").exists()


def test_a_campaign_path_that_is_a_folder_is_named_as_such(root, tmp_path, capsys):
    (tmp_path / "camp.yaml").mkdir()
    argv = ["campaign", str(tmp_path / "camp.yaml"), "--ablations", str(root), "--dry-run"]
    _one_line(capsys, main(argv), "is a folder; expected a campaign YAML file")


# ------------------------------------------------- what the report step reads, early
@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("table1: [\n", "paper_figures.yaml: not valid YAML"),
        ("- a\n", "paper_figures.yaml: expected a mapping of tables"),
        ("table1: {rows: [1]}\n", "table 'table1': rows[0]: expected a mapping"),
        ("table1: {rows: [{rsum: high}]}\n", "field 'rsum': expected a number"),
    ],
)
def test_the_report_steps_definitions_are_checked_before_a_run_trains(
    root, tmp_path, capsys, no_training, synth, text, said
):
    (root / "paper_figures.yaml").write_text(text)
    _one_line(capsys, main(_run(root, tmp_path, "--data-path", str(synth))), said)
    assert not list((tmp_path / "results").rglob("*.json"))
    # --no-report reads none of it: the run goes on (to the stand-in trainer)
    with pytest.raises(TrainingStarted):
        main(_run(root, tmp_path, "--data-path", str(synth), "--no-report"))


DESIGN = """designs:
  d: {claims: [scoring], matrices: [seven-differences], looks: [5, 10], spending: pocock,
      alpha: 0.05, margin: 0.06, reference: {flip: code, revert: paper}, blocks: [build],
      written: x}
"""


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        ("blocks: [build]", "blocks: [[build]]", "field 'blocks': expected a list of"),
        ("flip: code", "flip: [code]", "field 'reference': expected {flip: RUN"),
        ("spending: pocock", "spending: [pocock]", "field 'spending'"),
    ],
)
def test_a_malformed_sequential_design_is_one_line(tmp_path, old, new, said):
    (tmp_path / "sequential.yaml").write_text(DESIGN.replace(old, new))
    with pytest.raises(DesignError) as err:
        load_designs(tmp_path)
    assert said in str(err.value) and "sequential.yaml: design 'd'" in str(err.value)


def test_a_design_naming_a_matrix_no_claim_names_is_refused(tmp_path):
    from seps.report.sequential import check_design

    shutil.copytree(Path(__file__).resolve().parents[1] / "ablations", tmp_path / "a")
    (tmp_path / "a" / "sequential.yaml").write_text(DESIGN.replace("[seven-differences]", "[x]"))
    (design,) = load_designs(tmp_path / "a").values()
    with pytest.raises(DesignError, match=r"field 'matrices': \['x'\] named by no claim"):
        check_design(design, tmp_path / "a")


# --------------------------------------------------------------------- option values
def test_a_store_that_is_a_file_or_a_link_loop_is_refused_even_by_a_dry_run(root, tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    os.symlink(tmp_path / "loop2", tmp_path / "loop1")
    os.symlink(tmp_path / "loop1", tmp_path / "loop2")
    for store in ("file", "loop1"):
        argv = [*_run(root, tmp_path, "--dry-run"), "--results", str(tmp_path / store)]
        _one_line(capsys, main(argv), "--results", "expected a result store folder")
        argv = ["report", "mini", "--ablations", str(root), "--results", str(tmp_path / store)]
        _one_line(capsys, main(argv), "--results", "not a folder")


def test_export_to_a_link_loop_is_one_line(env, tmp_path, capsys):
    os.symlink(tmp_path / "loop2", tmp_path / "loop1")
    os.symlink(tmp_path / "loop1", tmp_path / "loop2")
    matrix = str(env["root"] / "matrices" / "mini.yaml")
    argv = ["export", matrix, "--results", str(env["results"]), "--output", str(tmp_path / "loop1")]
    _one_line(capsys, main(argv), "--output", "cannot be resolved")


# ------------------------------------------------- degenerate data, official layout
def _lines(path):
    return path.read_text().splitlines()


DAMAGE = {
    "empty split": (lambda d: (d / "train_caps.txt").write_text(""), "0 captions"),
    "not 5 captions an image": (
        lambda d: (d / "train_caps.txt").write_text("\n".join(_lines(d / "train_caps.txt")[:-2])),
        "is not a positive multiple of 5",
    ),
    "ids that do not match": (
        lambda d: (d / "train_ids.txt").write_text(
            "\n".join(["999999", *_lines(d / "train_ids.txt")[1:]])
        ),
        "train_ids.txt:2: id '0' differs",
    ),
    "fewer dense captions": (
        lambda d: (d / "synth_test.jsonl").write_text(
            "\n".join(_lines(d / "synth_test.jsonl")[:-1])
        ),
        "synth_test.jsonl: 5 dense captions; expected 6",
    ),
    "captions not UTF-8": (
        lambda d: (d / "train_caps.txt").write_bytes(b"\xff" + (d / "train_caps.txt").read_bytes()),
        "train_caps.txt: not valid UTF-8",
    ),
    "no image folder": (lambda d: shutil.rmtree(d / "images"), "image folder"),
    "zero images": (
        lambda d: [p.unlink() for p in (d / "images").iterdir()],
        "none of the 48 images of the train split is there",
    ),
    "one image missing": (
        lambda d: sorted((d / "images").iterdir())[3].unlink(),
        "synth_000003.png: image file missing",
    ),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_degenerate_official_layout_data_is_refused_before_any_run_trains(
    root, tmp_path, capsys, no_training, synth, case
):
    data = tmp_path / "f30k"
    shutil.copytree(synth, data, ignore=shutil.ignore_patterns("tokenizer-cache", "SHA256*"))
    damage, said = DAMAGE[case]
    damage(data)
    argv = _run(root, tmp_path, "--dataset", "f30k", "--data-path", str(data), "--no-report")
    _one_line(capsys, main(argv), said)
    assert not list((tmp_path / "results").rglob("*.json"))
    assert not list((tmp_path / "results").rglob("*.lock"))


def test_a_missing_image_is_the_runs_to_drop_with_skip_bad_images(
    root, tmp_path, no_training, synth
):
    data = tmp_path / "f30k"
    shutil.copytree(synth, data, ignore=shutil.ignore_patterns("tokenizer-cache", "SHA256*"))
    sorted((data / "images").iterdir())[3].unlink()
    argv = _run(root, tmp_path, "--dataset", "f30k", "--data-path", str(data), "--no-report")
    with pytest.raises(TrainingStarted):
        main([*argv, "--skip-bad-images"])


# ---------------------------------------------------------- damaged reused files
@pytest.mark.parametrize("damage", ["binary", "folder", "cut"])
def test_a_damaged_training_folder_marker_makes_the_folder_stale_not_an_error(tmp_path, damage):
    work = tmp_path / "abc-s0"
    work.mkdir()
    (work / "checkpoint_last.safetensors").write_bytes(b"state")
    marker = work / "code_version"
    if damage == "binary":
        marker.write_bytes(b"\xff\xfe\x00")
    elif damage == "folder":
        marker.mkdir()
    else:
        marker.write_text("0123")
    assert work_dir_version(work) != "0123456789abcdef"
    assert not reusable_work_dir(work, "0123456789abcdef")
    moved = claim_work_dir(work, "0123456789abcdef")
    assert moved is not None and moved.name == "abc-s0.stale"
    assert (moved / "checkpoint_last.safetensors").read_bytes() == b"state"
    assert work_dir_version(work) == "0123456789abcdef"


def test_status_lists_garbage_and_odd_lock_files_without_failing(env, capsys):
    repo = Path(__file__).resolve().parents[1] / "ablations"
    shutil.copy(repo / "profiles.yaml", env["root"] / "profiles.yaml")
    work = env["results"] / "_work"
    work.mkdir(exist_ok=True)
    (work / "0123456789abcdef-s0.lock").write_bytes(b"\x00\xffgarbage")
    (work / "0123456789abcdef-s1.lock").write_text("")
    odd = {"pid": 10**30, "host": ["x"], "since": "yesterday", "matrix": ["a"], "runs": [1]}
    (work / "0123456789abcdef-s2.lock").write_text(json.dumps(odd))
    odd = {"pid": 5, "host": "h", "since": 1e300, "matrix": {"a": 1}, "profile": 5}
    (work / "0123456789abcdef-s3.lock").write_text(json.dumps(odd))
    argv = ["status", "--ablations", str(env["root"]), "--results", str(env["results"])]
    assert main(argv) == 0
    assert main([*argv, "--json"]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err


def test_temporary_files_of_dead_odd_or_foreign_writers(tmp_path):
    assert not pid_alive(10**30)  # no pid can be that large: not an OverflowError
    assert temp_path(tmp_path / "r.json").name == f".r.json.{os.getpid()}@{host_tag()}.tmp"
    odd = tmp_path / ".r.json.99999999999999999999.tmp"
    mine_live = temp_path(tmp_path / "a.json")
    foreign = tmp_path / ".b.json.1@00000000.tmp"
    foreign_old = tmp_path / ".c.json.1@00000000.tmp"
    for path in (odd, mine_live, foreign, foreign_old):
        path.write_text("{")
    old = time.time() - FOREIGN_TEMP_AGE - 60
    os.utime(foreign_old, (old, old))
    assert sorted(clean_stale_temps(tmp_path)) == sorted([odd, foreign_old])
    assert mine_live.exists() and foreign.exists()  # a live writer's, and another host's


@pytest.mark.parametrize("log", ["[1, 2]", '{"rows": [{"matrix": ["x"]}]}', "\udcff{"])
def test_a_damaged_sequential_log_is_named_by_check_and_never_trusted(tmp_path, capsys, log):
    (tmp_path / "_sequential").mkdir()
    path = tmp_path / "_sequential" / "seven-differences.json"
    path.write_bytes(log.encode("utf-8", "surrogateescape"))
    argv = ["sequential", "seven-differences", "--check", "--results", str(tmp_path)]
    _one_line(capsys, main(argv), str(path), "not a readable analysis")


# ---------------------------------------------------------------- several writers
@pytest.mark.slow
def test_two_runs_a_campaign_and_readers_on_one_store_match_one_process(tmp_path):
    """Two ``run`` processes of matrices that share runs (twins), a ``campaign`` of both,
    and ``status``/``report`` readers, all on one store at once, with a feature cache (the
    frozen protocol) and a synthetic set made on first use by whichever gets there first:
    every process exits 0, each record is written once and equals a single process's
    bits (``same-bits``), and no lock or temporary file is left."""
    profile = PROFILE.replace("val_images: 0,", "val_images: 0, protocol: frozen,")
    profile = profile.replace("seeds: [0]", "seeds: [0, 1]")
    matrices = {
        "ma": MATRIX.replace("name: mini", "name: ma") + "  - {id: paper, preset: paper}\n",
        "mb": MATRIX.replace("name: mini", "name: mb"),
    }
    root = make_ablation_root(tmp_path / "ablations", matrices, profiles=profile)
    (tmp_path / "camp.yaml").write_text("profile: tiny\nsteps: [{matrix: mb}, {matrix: ma}]\n")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    common = ["--ablations", str(root), "--no-progress", "--no-tensorboard"]

    def cli(*args):
        return [sys.executable, "-m", "seps.cli", *args]

    def run(matrix, store):
        return cli("run", matrix, "--profile", "tiny", "--device", "cpu", "--results", store,
                   "--reports", f"reports-{matrix}", *common)  # fmt: skip

    writers = [
        run("ma", "shared"),
        run("mb", "shared"),
        cli("campaign", str(tmp_path / "camp.yaml"), "--results", "shared", *common),
    ]
    procs = [
        subprocess.Popen(c, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
        for c in writers
    ]  # fmt: skip
    readers = []
    while any(p.poll() is None for p in procs):
        for c in (
            cli("status", "--ablations", str(root), "--results", "shared", "--profile", "tiny"),
            cli("report", "ma", "--results", "shared", "--reports", "r", *common[:2]),
        ):
            readers.append(subprocess.run(c, cwd=tmp_path, env=env, capture_output=True, text=True))
    outs = [p.communicate(timeout=1200)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    for r in readers:  # a reader sees a store being written: whole records or none yet
        assert "Traceback" not in r.stderr and r.returncode in (0, 2), r.stderr
        assert r.returncode == 0 or "no run records" in r.stderr or "not a folder" in r.stderr
    for matrix in ("ma", "mb"):
        subprocess.run(run(matrix, "single"), cwd=tmp_path, env=env, check=True)
    same = subprocess.run(cli("same-bits", "single", "shared"), cwd=tmp_path, env=env,
                          capture_output=True, text=True)  # fmt: skip
    assert same.returncode == 0, same.stdout + same.stderr
    assert "10 with the same bits, 0 different" in same.stdout, same.stdout
    shared = tmp_path / "shared"
    names = sorted(p.name for m in ("ma", "mb") for p in (shared / m).iterdir())
    assert len(names) == 10 and all(n.endswith(".json") for n in names)
    for m in ("ma", "mb"):
        for p in (shared / m).iterdir():
            assert json.loads(p.read_text())["status"] == "done"
    left = [p for p in tmp_path.rglob("*") if p.suffix in (".lock", ".tmp") or ".corrupt" in p.name]
    assert not left, left
