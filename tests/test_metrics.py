import struct
import subprocess
import sys

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader

from runner.observe.events import crc32c, masked_crc32c, tf_record
from runner.observe.writer import TensorBoardLogger


def test_crc32c_is_castagnolis_crc_with_tfrecords_mask():
    assert crc32c(b"123456789") == 0xE3069283  # the standard CRC-32C check value
    assert crc32c(b"") == 0
    record = tf_record(b"event bytes")
    length, length_crc = struct.unpack("<QI", record[:12])
    assert length == len(b"event bytes") and length_crc == masked_crc32c(record[:8])
    assert record[12:-4] == b"event bytes"
    assert struct.unpack("<I", record[-4:])[0] == masked_crc32c(b"event bytes")


def test_the_event_file_reads_back_with_tensorboards_own_reader(tmp_path):
    logger = TensorBoardLogger(tmp_path)
    logger.log_text("run/plan", "device  cpu\nseed    0")
    for step in (1, 2, 3):
        logger.log_scalars(step, {"train/loss": 1.0 / step, "train/lr": 0.1})
    logger.close()

    (event_file,) = tmp_path.glob("events.out.tfevents.*")
    # TensorBoard's loader checks both checksums of every record and stops at the first bad one.
    # Version, text, 3 steps.
    assert len(list(RawEventFileLoader(str(event_file)).Load())) == 5
    accumulator = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    losses = accumulator.Scalars("train/loss")
    assert [e.step for e in losses] == [1, 2, 3]
    assert [e.value for e in losses] == pytest.approx([1.0, 0.5, 1 / 3])  # stored as float32
    (plan,) = accumulator.Tensors("run/plan/text_summary")
    assert plan.tensor_proto.string_val[0].decode() == "    device  cpu\n    seed    0"


@pytest.mark.slow
def test_training_imports_no_tensorboard_summary_package():
    """TensorBoard's summary package (absl flags, fsspec, the TensorFlow stub) costs 40-150 ms of
    start-up before the first step; the run writes its events without it."""
    probe = (
        "import sys, runner.experiment.train; "
        "print(sorted(m for m in sys.modules if m.startswith(('tensorboard.summary', 'absl', "
        "'tensorboard.compat.tensorflow_stub', 'torch.utils.tensorboard'))))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
