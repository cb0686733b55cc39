"""TensorBoard export and import: stored runs → export_tensorboard → TensorBoard's own reader (equal values at equal
steps), and folders written by PyTorch's SummaryWriter → import_tensorboard → the store's series."""
import struct
from pathlib import Path

import numpy as np
import pytest
from tensorboard import context
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.backend.event_processing import plugin_event_accumulator as pea
from tensorboard.plugins.hparams import metadata as hparams_metadata
from tensorboard.util import tensor_util
from torch.utils.tensorboard import SummaryWriter

from ddpgui.core.outputs.tensorboard import export_tensorboard, hparams_of
from ddpgui.core.runs import tbimport
from ddpgui.core.runs.tbimport import TensorBoardImportError, import_tensorboard
from ddpgui.core.store import RunStore
from tests.helpers.stored_runs import store_run

CONFIG = {"workload": "mlp", "precision": "bf16", "compile": "off", "nproc_per_node": 2, "batch_size": 32,
          "lr": 0.001, "name": "mlp 2x", "run_id": "r1", "tags": ["a"], "env": {"NCCL_DEBUG": "INFO"},
          "script": {"entry": "train.py", "args": ["--x"]}, "gpus": None}


def _metrics(n: int, t0: float = 1_700_000_000.0) -> list[dict]:
    out = []
    for i in range(n):
        record = {"t": t0 + i * 0.37, "step": 10 * (i + 1), "phase": "train", "loss": 2.0 / (i + 1) + 1e-12 * i,
                  "lr": 1e-3 * 0.99 ** i, "samples_per_s": 1234.5678 + i, "warmup": i < 2, "world_size": 2,
                  "global_batch": 64}
        if i % 3 == 2:
            record["eval_loss"] = 1.5 / (i + 1)
        if i == 4:
            record["loss"] = None
        out.append(record)
    out.append({"t": t0 + 99, "phase": "train", "loss": 9.0})  # a record without a step: not exported
    return out


@pytest.fixture
def store(tmp_path):
    with RunStore(tmp_path / "runs.sqlite3") as s:
        yield s


def _accumulator(folder: Path) -> pea.EventAccumulator:
    acc = pea.EventAccumulator(str(folder), size_guidance={pea.TENSORS: 0})
    acc.Reload()
    return acc


def _read_back(folder: Path) -> dict[str, list[tuple[int, float, float]]]:
    """Tag → [(step, wall time, value)] as TensorBoard's own accumulator reads the folder."""
    acc = _accumulator(folder)
    return {tag: [(e.step, e.wall_time, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors(tag)]
            for tag in acc.Tags()["tensors"] if not tag.startswith("_hparams_")}


def test_export_round_trip_through_tensorboards_reader(store, tmp_path):
    metrics = _metrics(12)
    store_run(store, "20261201-000000-aaaaaa", CONFIG, metrics)
    store_run(store, "20261201-000000-bbbbbb", dict(CONFIG, name="a/b: c?"), _metrics(3, t0=1_700_000_100.0))
    written = export_tensorboard(store, ["20261201-000000-aaaaaa", "20261201-000000-bbbbbb"], tmp_path / "tb")
    folders = list(written)
    assert [f.name for f in folders] == ["mlp_2x-20261201-000000-aaaaaa", "a_b_c-20261201-000000-bbbbbb"]
    back = _read_back(folders[0])
    assert set(back) == {"loss", "lr", "samples_per_s", "eval_loss"}  # no seq, t, step, phase, warmup, world_size…
    for tag, points in back.items():
        expected = [(r["step"], r["t"], r[tag]) for r in metrics if "step" in r and r.get(tag) is not None]
        assert points == expected, tag  # doubles: the stored values exactly, at their step and wall time
    assert written[folders[0]] == sum(len(p) for p in back.values())
    # the scalars dashboard's own read path sees the same numbers
    multiplexer = plugin_event_multiplexer.EventMultiplexer(size_guidance={pea.TENSORS: 0})
    multiplexer.AddRunsFromDirectory(str(tmp_path / "tb"))
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, str(tmp_path / "tb"))
    scalars = provider.read_scalars(context.RequestContext(), experiment_id="", plugin_name="scalars",
                                    downsample=1000, run_tag_filter=None)
    assert [(d.step, d.value) for d in scalars[folders[0].name]["loss"]] == [(s, v) for s, _, v in back["loss"]]
    assert set(scalars) == {f.name for f in folders}


def test_export_writes_the_settings_as_hparams(store, tmp_path):
    store_run(store, "20261201-000000-aaaaaa", CONFIG, _metrics(2))
    (folder,) = export_tensorboard(store, ["20261201-000000-aaaaaa"], tmp_path / "tb")
    content = _accumulator(folder).PluginTagToContent(hparams_metadata.PLUGIN_NAME)
    info = hparams_metadata.parse_session_start_info_plugin_data(content[hparams_metadata.SESSION_START_INFO_TAG])
    got = {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind")) for k, v in info.hparams.items()}
    assert got == {"workload": "mlp", "precision": "bf16", "compile": "off", "nproc_per_node": 2, "batch_size": 32,
                   "lr": 0.001, "env.NCCL_DEBUG": "INFO", "script.entry": "train.py"}
    assert hparams_of(CONFIG) == got


def test_export_again_replaces_the_runs_event_file(store, tmp_path):
    store_run(store, "20261201-000000-aaaaaa", CONFIG, _metrics(4))
    for _ in range(2):
        (folder,) = export_tensorboard(store, ["20261201-000000-aaaaaa"], tmp_path / "tb")
    assert len(list(folder.glob("events.out.tfevents.*"))) == 1
    assert len(_read_back(folder)["loss"]) == 4


def _summary_writer_runs(log_dir: Path) -> dict[str, list[tuple[int, str, float]]]:
    """Two runs written the ordinary way: one old-style with hparams (add_hparams), one new-style."""
    written: dict[str, list[tuple[int, str, float]]] = {"lr=0.001,bs=32": [], "baseline": []}
    writer = SummaryWriter(str(log_dir / "lr=0.001,bs=32"))
    for step in range(6):
        for tag, value in (("train/loss", 3.0 / (step + 1)), ("learning_rate", 1e-3 * 0.5 ** step)):
            writer.add_scalar(tag, value, step)
            written["lr=0.001,bs=32"].append((step, tag, value))
        if step % 2:
            writer.add_scalar("eval/loss", 2.5 / (step + 1), step)
            written["lr=0.001,bs=32"].append((step, "eval/loss", 2.5 / (step + 1)))
    writer.add_histogram("weights", np.arange(5.0), 0)
    writer.add_hparams({"lr": 0.001, "optimizer": "adam", "bs": 32, "amp": True}, {"hparam/accuracy": 0.75})
    writer.close()
    writer = SummaryWriter(str(log_dir / "baseline"))
    for step in range(0, 40, 10):
        writer.add_scalar("Loss/train", 1.0 / (step + 1), step, new_style=True)
        writer.add_scalar("accuracy", step / 100, step, new_style=True, double_precision=True)
        written["baseline"] += [(step, "Loss/train", 1.0 / (step + 1)), (step, "accuracy", step / 100)]
    writer.close()
    return written


def _f32(x: float) -> float:
    return float(np.float32(x))


def _series(store: RunStore, run_id: str, key: str) -> list[tuple[int, float]]:
    s = store.series(run_id, keys=["step", key])
    keep = np.isfinite(s[key])
    return [(int(a), float(b)) for a, b in zip(s["step"][keep], s[key][keep])]


def test_import_of_summary_writer_runs(store, tmp_path):
    written = _summary_writer_runs(tmp_path / "logs")
    result = import_tensorboard(store, tmp_path / "logs")
    assert result.skipped == [] and result.warnings == [] and result.known == []
    runs = {r.run.name: r for r in result.imported}
    assert set(runs) == {"lr=0.001,bs=32", "baseline"}

    tuned = runs["lr=0.001,bs=32"]
    run = store.get_run(tuned.run.id)
    assert run.hosts == [tbimport.IMPORTED_HOST] and run.state == "finished" and run.run_dirs == {}
    assert run.config["lr"] == 0.001 and run.config["bs"] == 32 and run.config["optimizer"] == "adam"
    # PyTorch's add_hparams writes a bool as a number
    assert tuned.settings == {"lr": 0.001, "bs": 32, "optimizer": "adam", "amp": 1} and run.config["amp"] == 1
    names = {"train/loss": "loss", "learning_rate": "lr", "eval/loss": "eval_loss"}
    for tag, name in names.items():
        assert _series(store, run.id, name) == [(s, _f32(v)) for s, t, v in written[run.name] if t == tag], name
    assert _series(store, run.id, "hparam/accuracy") == [(0, 0.75)]  # add_hparams' metric, from its subfolder
    assert tuned.files == 2 and tuned.series == 4
    assert tuned.points == len(written[run.name]) + 1
    records = store.records(run.id)
    assert [r["step"] for r in records] == list(range(6))  # one record per step, every tag of the step in it
    assert all(r["src"] == "tensorboard" for r in records)
    t = store.series(run.id, keys=["t"])["t"]
    assert run.started_at == t.min() and run.ended_at >= t.max() and run.ended_at - run.started_at < 60
    series_events = {e["name"]: e for e in store.events(run.id) if e.get("event") == "series"}
    assert series_events["loss"]["loss"] is True and series_events["loss"]["source"] == "TensorBoard tag train/loss"
    assert run.summary["final_loss"] == _f32(0.5)

    baseline = store.get_run(runs["baseline"].run.id)
    assert _series(store, baseline.id, "loss") == [(s, _f32(v)) for s, t, v in written["baseline"] if t == "Loss/train"]
    assert _series(store, baseline.id, "accuracy") == [(s, v) for s, t, v in written["baseline"] if t == "accuracy"]
    assert runs["baseline"].settings == {}

    again = import_tensorboard(store, tmp_path / "logs")
    assert again.imported == [] and sorted(again.known) == sorted((r.run.id, r.folder) for r in result.imported)
    assert len(store.list_runs()) == 2


def test_export_then_import_gives_the_same_series(store, tmp_path):
    metrics = _metrics(8)
    store_run(store, "20261201-000000-aaaaaa", CONFIG, metrics)
    export_tensorboard(store, ["20261201-000000-aaaaaa"], tmp_path / "tb")
    (imported,) = import_tensorboard(store, tmp_path / "tb").imported
    assert imported.settings == hparams_of(CONFIG)
    for key in ("loss", "lr", "samples_per_s", "eval_loss"):
        assert _series(store, imported.run.id, key) == [(r["step"], r[key]) for r in metrics
                                                          if "step" in r and r.get(key) is not None], key


def test_a_folder_holding_event_files_itself_is_one_run(store, tmp_path):
    folder = tmp_path / "my_run"
    writer = SummaryWriter(str(folder))
    writer.add_scalar("train_loss", 0.5, 1)
    writer.close()
    (run,) = import_tensorboard(store, folder).imported
    assert run.run.name == "my_run" and _series(store, run.run.id, "loss") == [(1, 0.5)]
    assert run.run.id == tbimport.run_id_of(folder.resolve(), list(folder.glob("events*")))


def _damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    bounds, pos = [], 0
    while pos < len(data):
        pos += 16 + struct.unpack_from("<Q", data, pos)[0]
        bounds.append(pos)
    if how == "corrupt":  # the length of record 3 (of 1 + 10 scalars)
        data[bounds[2]] ^= 0xFF
    elif how == "data":  # a byte of record 3's value: its data CRC (which TensorBoard's reader checks) fails
        data[bounds[3] - 6] ^= 0x01
    else:
        data = data[:bounds[-1] - 5]
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["corrupt", "data", "truncated"])
def test_a_damaged_event_file_is_said_and_the_rest_imported(store, tmp_path, how):
    log_dir = tmp_path / "logs"
    for name in ("damaged", "fine"):
        writer = SummaryWriter(str(log_dir / name))
        for step in range(10):
            writer.add_scalar("loss", step + 0.5, step)
        writer.close()
    (event_file,) = (log_dir / "damaged").glob("events*")
    _damage(event_file, how)
    (log_dir / "damaged" / "events.out.tfevents.0.empty").write_bytes(b"")  # a 0-byte file: nothing, no harm
    result = import_tensorboard(store, log_dir)
    runs = {r.run.name: r.run for r in result.imported}
    assert _series(store, runs["fine"].id, "loss") == [(s, s + 0.5) for s in range(10)]
    damaged = _series(store, runs["damaged"].id, "loss")
    if how != "truncated":  # record 3 (step 2) lost; TensorBoard's reader stops there, the rest is read past it
        assert damaged == [(s, s + 0.5) for s in range(10) if s != 2]
        assert "damaged at byte" in result.warnings[0] and "(1 damaged record(s) or stretch(es) skipped); 7 " \
            "value(s) after the damage were read" in result.warnings[0]
    else:
        assert damaged == [(s, s + 0.5) for s in range(9)]
        assert "a record cut short" in result.warnings[0]
    assert len(result.warnings) == 1 and str(event_file) in result.warnings[0]
    assert any(e.get("event") == "warning" and e["message"] == result.warnings[0]
               for e in store.events(runs["damaged"].id))


def test_import_refuses_what_it_cannot_read(store, tmp_path):
    with pytest.raises(TensorBoardImportError, match="is not a folder") as info:
        import_tensorboard(store, tmp_path / "missing")
    assert "--logdir" in info.value.hint
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    with pytest.raises(TensorBoardImportError, match="no TensorBoard event files"):
        import_tensorboard(store, tmp_path / "empty")
    writer = SummaryWriter(str(tmp_path / "texts"))
    writer.add_text("note", "no numbers here", 0)
    writer.close()
    result = import_tensorboard(store, tmp_path / "texts")
    assert result.imported == [] and result.skipped == [((tmp_path / "texts").resolve(),
                                                            "its event files hold no scalar values")]
    assert store.list_runs() == []


@pytest.mark.parametrize("name, settings", [
    ("lr=0.001,bs=32", {"lr": 0.001, "bs": 32}),
    ("lr=0.1_bs=64_opt=adam", {"lr": 0.1, "bs": 64, "opt": "adam"}),
    ("sweep/lr=3e-4/seed=2", {"lr": 3e-4, "seed": 2}),
    ("run 7, dropout=0.1", {"dropout": 0.1}),
    ("baseline", {}),
    ("=1,a==2", {}),
])
def test_settings_from_a_folder_name(name, settings):
    got = tbimport.settings_from_name(name)
    assert got == settings and all(type(got[k]) is type(settings[k]) for k in settings)
