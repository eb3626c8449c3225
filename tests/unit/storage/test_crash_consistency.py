"""Every crash image of the storage engine's workloads reopens to a sound log.

The checker (package ``crash``) records every file-system operation a workload makes (write,
truncate, fsync, fdatasync, rename, unlink, directory creation and fsync), replays them into
a model of what a file system keeps, and at every point between two operations builds the
crash images the rules allow: a process kill (everything written), a power loss (each file
as of its last sync, each directory entry as of its directory's last sync), and power losses
where some unsynced writes and directory operations reached the disk too, the last write
possibly torn. Each distinct image is reopened and checked (crash/checks.py).

In CI each workload checks a fixed sample of its distinct images, the same every run.
``RAFKA_CRASH_EXHAUSTIVE=1`` checks all of them. To replay one image (the failure message
names it), run

    RAFKA_CRASH_IMAGE=<workload>:<point>:<variant> pytest \
        tests/unit/storage/test_crash_consistency.py -k <workload> -s

which writes the image to ``./crash-image``, keeps it, and prints what the check found.
"""

from __future__ import annotations

import os
import random

import pytest

from rafka.storage import Log

from .crash.checks import check_image
from .crash.ledger import Ledger
from .crash.images import VARIANTS, digest, image_of, materialize
from .crash.model import Image
from .crash.recorder import Recorder, Replayer, describe
from .crash.workloads import WORKLOADS, Driver

SAMPLE = 400  # distinct images checked per workload in CI (about two thirds of them)
def run_workload(name: str, root: str, monkeypatch) -> tuple[list, Ledger]:
    workload, config, _ = WORKLOADS[name]
    os.makedirs(root)
    recorder = Recorder(root)
    with monkeypatch.context() as patched:
        recorder.install(patched)
        ledger = Ledger()
        driver = Driver(root, config, recorder, ledger)
        workload(driver, random.Random(name))
        driver.log.abandon()
    return recorder.operations, ledger


def distinct_images(name: str, operations: list, ledger: Ledger) -> list[tuple[int, str]]:
    """(point, variant) of the first occurrence of every distinct image under each must-set
    (the same files can be sound before a flush returns and unsound after)."""
    seen: set[tuple[bytes, int]] = set()
    found = []
    replayer = Replayer(operations)
    for point in range(len(operations) + 1):
        for variant in VARIANTS:
            key = (digest(image_of(replayer.model, name, point, variant)),
                   ledger.must_version(point))  # fmt: skip
            if key not in seen:
                seen.add(key)
                found.append((point, variant))
        if point < len(operations):
            replayer.step()
    return found


def context(operations: list, point: int) -> str:
    lines = [f"  {i:5d} {describe(operations[i])}" for i in range(max(0, point - 6), point)]
    return "\n".join(lines) or "  (before any operation)"


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_every_crash_image_reopens_to_a_sound_log(name, tmp_path, monkeypatch):
    _, config, contiguous = WORKLOADS[name]
    operations, ledger = run_workload(name, str(tmp_path / "live"), monkeypatch)

    wanted = os.environ.get("RAFKA_CRASH_IMAGE", "")
    if wanted:
        workload, point, variant = wanted.split(":")
        if workload != name:
            pytest.skip(f"replaying an image of {workload}")
        replay_one(name, operations, ledger, config, contiguous, int(point), variant)
        return

    candidates = distinct_images(name, operations, ledger)
    if os.environ.get("RAFKA_CRASH_EXHAUSTIVE") != "1" and len(candidates) > SAMPLE:
        candidates = sorted(random.Random(name).sample(candidates, SAMPLE))
    chosen: dict[int, list[str]] = {}
    for point, variant in candidates:
        chosen.setdefault(point, []).append(variant)

    failures = []
    replayer = Replayer(operations)
    directory = str(tmp_path / "image")
    for point in range(len(operations) + 1):
        for variant in chosen.get(point, ()):
            image = image_of(replayer.model, name, point, variant)
            problem = check_image(image, directory, config, ledger, point, contiguous)
            if problem is not None:
                failures.append((point, variant, problem))
        if point < len(operations):
            replayer.step()
    print(f"{name}: {len(operations)} operations recorded, {len(candidates)} distinct crash "
          f"images checked, {len(failures)} unsound")  # fmt: skip
    if failures:
        report = "\n\n".join(
            f"crash after operation {point} ({variant}): {problem}\n{context(operations, point)}\n"
            f"  replay: RAFKA_CRASH_IMAGE={name}:{point}:{variant} pytest "
            f"tests/unit/storage/test_crash_consistency.py -k {name} -s"
            for point, variant, problem in failures[:5]
        )  # fmt: skip
        pytest.fail(f"{len(failures)} of {len(candidates)} crash images of {name} are "
                    f"unsound:\n\n{report}", pytrace=False)  # fmt: skip


def replay_one(name, operations, ledger, config, contiguous, point, variant) -> None:
    replayer = Replayer(operations)
    while replayer.done < point:
        replayer.step()
    image = image_of(replayer.model, name, point, variant)
    kept = os.path.abspath("crash-image")
    materialize(image, kept)
    problem = check_image(image, str(os.path.abspath("crash-image-check")), config, ledger,
                          point, contiguous)  # fmt: skip
    print(f"\nimage {name}:{point}:{variant} written to {kept}\n{context(operations, point)}")
    print(f"must hold {len(ledger.must(point))} flushed records; check: {problem or 'sound'}")
    assert problem is None, problem


def power_loss_now(recorder: Recorder) -> Image:
    """The image a power loss would leave after everything recorded so far."""
    replayer = Replayer(recorder.operations)
    while replayer.done < len(recorder.operations):
        replayer.step()
    return replayer.model.after_power_loss()


def test_a_truncation_survives_a_power_loss_once_truncate_to_returns(tmp_path, monkeypatch):
    """Records a follower truncated as divergent must not come back after a power loss: the
    shortened segment is synced even when nothing was appended to it since its last flush
    (they would come back under the new leader epoch's checkpointed start)."""
    root = str(tmp_path / "live")
    os.makedirs(root)
    recorder = Recorder(root)
    recorder.install(monkeypatch)
    ledger = Ledger()
    driver = Driver(root, {"segment.bytes": 100_000}, recorder, ledger)
    for _ in range(10):
        driver.append([b"x" * 20] * 3)
    driver.flush()
    driver.truncate_to(12)
    image = power_loss_now(recorder)
    driver.log.abandon()
    monkeypatch.undo()
    problem = check_image(image, str(tmp_path / "image"), {"segment.bytes": 100_000}, ledger,
                          len(recorder.operations), contiguous=True)  # fmt: skip
    assert problem is None
    materialize(image, str(tmp_path / "again"))
    reopened = Log(str(tmp_path / "again" / "topic-0"))
    try:
        assert reopened.log_end_offset == 12
    finally:
        reopened.abandon()


def _power_loss_after(tmp_path, monkeypatch, workload) -> tuple[Image, Ledger, int]:
    """Run ``workload(driver)`` under the recorder; the power-loss image at its end."""
    root = str(tmp_path / "live")
    os.makedirs(root)
    recorder = Recorder(root)
    with monkeypatch.context() as patched:
        recorder.install(patched)
        ledger = Ledger()
        driver = Driver(root, {"segment.bytes": 600}, recorder, ledger)
        workload(driver)
        image = power_loss_now(recorder)
        driver.log.abandon()
    return image, ledger, len(recorder.operations)


def test_records_flushed_into_a_newly_rolled_segment_survive_a_power_loss(tmp_path, monkeypatch):
    """The flush that first covers a segment created by a roll syncs the directory too."""

    def roll_then_flush(driver):
        for _ in range(12):
            driver.append([b"y" * 40] * 2)
        assert len(driver.log.segments) > 1
        driver.flush()

    image, ledger, point = _power_loss_after(tmp_path, monkeypatch, roll_then_flush)
    assert check_image(image, str(tmp_path / "image"), {"segment.bytes": 600}, ledger, point,
                       contiguous=True) is None  # fmt: skip


def test_a_new_partition_directory_survives_a_power_loss_once_a_flush_returns(
    tmp_path, monkeypatch
):
    """The partition directory's own entry in the data directory is synced when its log is
    created, so a flushed record cannot vanish with the whole directory."""

    def append_and_flush(driver):
        driver.append([b"first"])
        driver.flush()

    image, ledger, point = _power_loss_after(tmp_path, monkeypatch, append_and_flush)
    assert "topic-0" in image
    assert check_image(image, str(tmp_path / "image"), {"segment.bytes": 600}, ledger, point,
                       contiguous=True) is None  # fmt: skip
