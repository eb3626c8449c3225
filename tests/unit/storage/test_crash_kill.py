"""A writer killed with SIGKILL mid-stream loses no batch it had flushed."""

import os
import random
import signal
import subprocess
import sys
import textwrap

import pytest

from rafka.storage import Log, LogConfig

from .support import read_all

CONFIG = {"segment.bytes": 64 * 1024, "index.interval.bytes": 1024}

WRITER = textwrap.dedent("""
    import sys
    from rafka.storage import Log, LogConfig
    from rafka.storage import record_batch as rb
    log = Log(sys.argv[1], LogConfig.from_dict(%r))
    while True:
        start = log.log_end_offset
        values = [b"value-%%d" %% (start + i) for i in range(50)]
        log.append_as_leader(rb.encode_batch(values, timestamps=0), leader_epoch=0)
        log.flush()
        print(log.log_end_offset, flush=True)   # acknowledged: fsynced
""" % CONFIG)


@pytest.mark.slow
def test_sigkill_during_appends_loses_no_flushed_batch(tmp_path):
    """Three rounds of append+flush killed at a random moment; each reopen holds every
    acknowledged record, in order, with nothing after the end but whole batches."""
    directory = str(tmp_path / "t-0")
    rng = random.Random(20261121)
    for round_ in range(3):
        child = subprocess.Popen([sys.executable, "-c", WRITER, directory],
                                 stdout=subprocess.PIPE, text=True)
        acknowledged = 0
        for _ in range(rng.randint(20, 400)):
            line = child.stdout.readline()
            if not line:
                break
            acknowledged = int(line)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        child.stdout.close()
        log = Log(directory, LogConfig.from_dict(CONFIG))
        records = read_all(log)
        print(f"round {round_}: acknowledged {acknowledged}, recovered {log.log_end_offset}, "
              f"{log.recovery_report.summary()}")
        assert acknowledged > 0, "the writer never acknowledged a flush"
        assert log.log_end_offset >= acknowledged
        assert [r[0] for r in records] == list(range(log.log_end_offset))
        assert all(r[2] == b"value-%d" % r[0] for r in records)
        log.close()
