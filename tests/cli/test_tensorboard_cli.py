"""``ddpgui import-tensorboard DIR`` and ``ddpgui export RUN... --format tensorboard`` through the real
``python -m ddpgui``, on folders written by PyTorch's SummaryWriter."""
import json
import struct

import numpy as np
from tensorboard.backend.event_processing import plugin_event_accumulator as pea
from tensorboard.util import tensor_util
from torch.utils.tensorboard import SummaryWriter

from tests.helpers.cli_process import cli_env, run_cli


def _write_logs(log_dir):
    """Two runs: 'lr=0.01,bs=8' (train/loss, eval/loss) and 'plain' (loss); returns tag → [(step, value)]."""
    written = {}
    for name, tags in (("lr=0.01,bs=8", ("train/loss", "eval/loss")), ("plain", ("loss",))):
        writer = SummaryWriter(str(log_dir / name))
        for step in range(5):
            for k, tag in enumerate(tags):
                value = (k + 1.0) / (step + 1)
                writer.add_scalar(tag, value, step)
                written.setdefault((name, tag), []).append((step, float(np.float32(value))))
        writer.close()
    return written


def test_import_then_export_through_the_cli(tmp_path):
    env = cli_env(tmp_path)
    log_dir = tmp_path / "logs"
    written = _write_logs(log_dir)

    rc, out, err = run_cli(["import-tensorboard", str(log_dir)], env)
    assert rc == 0, err
    lines = out.splitlines()
    assert any(line.startswith("imported tb-") and "'lr=0.01,bs=8': 2 series, 10 points; settings lr=0.01 bs=8"
               in line for line in lines), out
    assert any("'plain': 1 series, 5 points" in line for line in lines), out
    assert lines[-1] == "2 run(s) imported: 3 series, 15 points" and err == ""

    rc, out, err = run_cli(["import-tensorboard", str(log_dir), "--json"], env)
    assert rc == 0, err
    again = json.loads(out)
    assert again["imported"] == [] and len(again["known"]) == 2 and again["warnings"] == []

    rc, out, err = run_cli(["runs", "--json"], env)
    runs = {r["name"]: r for r in json.loads(out)}
    assert set(runs) == {"lr=0.01,bs=8", "plain"} and {r["host"] for r in runs.values()} == {"imported"}
    rc, out, err = run_cli(["show", runs["lr=0.01,bs=8"]["id"]], env)
    assert rc == 0 and "  settings    imported from TensorBoard: lr=0.01 bs=8\n" in out, out
    assert "  series      loss  TensorBoard tag train/loss" in out and "None" not in out, out
    assert f"  imported    from {log_dir / 'lr=0.01,bs=8'} (1 event file)" in out, out

    out_dir = tmp_path / "exported"
    rc, out, err = run_cli(["export", runs["lr=0.01,bs=8"]["id"], runs["plain"]["id"], "--format", "tensorboard",
                            "--out", str(out_dir)], env)
    assert rc == 0, err
    folders = sorted(p for p in out_dir.iterdir())
    assert [p.name for p in folders] == sorted(f"{n}-{runs[n]['id']}" for n in runs)
    assert f"{folders[0]}  (10 values)" in out and out.splitlines()[-1].startswith("open it with: tensorboard")
    for folder, name, names in ((folders[0], "lr=0.01,bs=8", {"train/loss": "loss", "eval/loss": "eval_loss"}),
                                (folders[1], "plain", {"loss": "loss"})):
        acc = pea.EventAccumulator(str(folder), size_guidance={pea.TENSORS: 0})
        acc.Reload()
        for tag, series in names.items():  # what SummaryWriter wrote, at its steps, as TensorBoard reads it back
            assert [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors(series)] == \
                written[(name, tag)]


def test_a_damaged_event_file_is_said_and_the_rest_imported(tmp_path):
    env = cli_env(tmp_path)
    log_dir = tmp_path / "logs"
    _write_logs(log_dir)
    (event_file,) = (log_dir / "plain").glob("events*")
    data = bytearray(event_file.read_bytes())
    first = 16 + struct.unpack_from("<Q", data, 0)[0]
    data[first + 3] ^= 0x77  # the length of the first scalar's record
    event_file.write_bytes(bytes(data))
    rc, out, err = run_cli(["import-tensorboard", str(log_dir)], env)
    assert rc == 0, err
    assert "'plain': 1 series, 4 points" in out and "2 run(s) imported" in out
    assert f"warning: {event_file}: damaged at byte {first} (1 damaged record(s) or stretch(es) skipped); 4 value(s)" in err


def test_errors_say_what_to_do(tmp_path):
    env = cli_env(tmp_path)
    (tmp_path / "nothing").mkdir()
    rc, out, err = run_cli(["import-tensorboard", str(tmp_path / "nothing")], env)
    assert rc == 2 and out == ""
    assert "ddpgui: no TensorBoard event files (events.out.tfevents.*) under" in err and "hint: give the folder" in err
    writer = SummaryWriter(str(tmp_path / "texts" / "run"))
    writer.add_text("note", "no numbers", 0)
    writer.close()
    rc, out, err = run_cli(["import-tensorboard", str(tmp_path / "texts")], env)
    assert rc == 2 and "nothing imported" in err and "hold no scalar values" in err and "hint:" in err
    rc, out, err = run_cli(["export", "nope", "--format", "hdf5", "--out", str(tmp_path / "x")], env)
    assert rc == 2 and "invalid choice: 'hdf5'" in err
