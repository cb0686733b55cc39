"""The built-in workloads without torchrun: shapes, sizes, FLOPs and deterministic datasets."""
import pytest
import torch
from torch.utils.data import DataLoader

from remote_runner.config import RunConfig
from remote_runner.workloads import GPT_SEQ, GPT_VOCAB, build_workload

WORKLOADS = ("linear", "mlp", "transformer", "cnn")

#: Parameter counts written out layer by layer, so a change to an architecture is a deliberate one.
EXPECTED_PARAMS = {
    "linear": 64 * 10 + 10,
    "mlp": (128 * 256 + 256) + 2 * (256 * 256 + 256) + (256 * 10 + 10),
    "transformer": (256 * 128 + 64 * 128)                  # token and position embeddings
    + 2 * (2 * 2 * 128 + (128 * 384 + 384) + (128 * 128 + 128) + (128 * 512 + 512) + (512 * 128 + 128))
    + 2 * 128 + 128 * 256,                                 # final LayerNorm, untied head
    "cnn": (3 * 16 * 9 + 2 * 16)                           # stem conv + BatchNorm
    + 2 * (16 * 16 * 9 + 2 * 16)                           # stage 1
    + (16 * 32 * 9 + 32 * 32 * 9 + 16 * 32 + 3 * 2 * 32)  # stage 2 with its projection shortcut
    + (32 * 64 * 9 + 64 * 64 * 9 + 32 * 64 + 3 * 2 * 64)  # stage 3 with its projection shortcut
    + 64 * 10 + 10,                                        # classifier
}


def _build(workload: str, **overrides):
    torch.manual_seed(0)
    return build_workload(RunConfig(workload=workload, dataset_size=64, **overrides), torch.device("cpu"))


def _batch(dataset, n: int = 4):
    xs, ys = zip(*(dataset[i] for i in range(n)))
    return torch.stack(xs), torch.stack(ys)


@pytest.mark.parametrize("workload", WORKLOADS)
def test_model_output_fits_its_loss_and_dataset(workload):
    work = _build(workload)
    x, y = _batch(work.dataset)
    loss = work.loss_fn(work.model(x), y)
    assert loss.dim() == 0 and torch.isfinite(loss)
    assert len(work.dataset) == 64
    assert work.params == EXPECTED_PARAMS[workload]


def test_transformer_shapes_and_tokens():
    work = _build("transformer")
    x, y = _batch(work.dataset)
    assert x.shape == y.shape == (4, GPT_SEQ) and x.dtype == torch.long
    assert work.model(x).shape == (4, GPT_SEQ, GPT_VOCAB)
    assert int(x.max()) < GPT_VOCAB
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the next tokens
    assert work.tokens_per_sample == GPT_SEQ


@pytest.mark.parametrize("workload,x_shape,y_shape", [
    ("linear", (64,), (10,)), ("mlp", (128,), ()), ("cnn", (3, 32, 32), ())])
def test_sample_shapes(workload, x_shape, y_shape):
    x, y = _build(workload).dataset[5]
    assert tuple(x.shape) == x_shape and tuple(y.shape) == y_shape


@pytest.mark.parametrize("workload", WORKLOADS)
def test_datasets_are_deterministic_from_the_seed(workload):
    first, again, other = _build(workload).dataset, _build(workload).dataset, _build(workload, seed=1).dataset
    for i in (0, 17, 63):
        assert all(torch.equal(a, b) for a, b in zip(first[i], again[i]))
    assert not torch.equal(first[3][0], other[3][0])
    assert not torch.equal(first[3][0], first[4][0])


@pytest.mark.parametrize("workload", ["transformer", "cnn"])
def test_per_index_datasets_give_the_same_samples_in_dataloader_workers(workload):
    dataset = _build(workload).dataset
    loaded = list(DataLoader(dataset, batch_size=8, num_workers=2))
    x, y = _batch(dataset, 8)
    assert torch.equal(loaded[0][0], x) and torch.equal(loaded[0][1], y)
    assert sum(len(batch[0]) for batch in loaded) == 64


def test_mlp_flops_are_the_counted_matmuls():
    # forward 2·W per layer, backward 4·W, except that no gradient flows into the input
    weights = [128 * 256, 256 * 256, 256 * 256, 256 * 10]
    assert _build("mlp").flops_per_sample == 6 * sum(weights) - 2 * weights[0]


def test_transformer_flops_follow_the_6n_plus_attention_estimate():
    work = _build("transformer")
    n = EXPECTED_PARAMS["transformer"] - (256 * 128 + 64 * 128)
    assert work.flops_per_sample == (6 * n + 12 * 2 * 128 * GPT_SEQ) * GPT_SEQ


def test_cnn_flops_are_counted():
    flops = _build("cnn").flops_per_sample
    # dominated by the 3x3 convolutions: at least the forward multiply-adds of the first stage
    assert flops is not None and flops > 3 * 2 * (16 * 16 * 9) * 32 * 32


def test_flop_counting_leaves_the_model_untouched():
    work = _build("cnn")
    assert all(p.grad is None for p in work.model.parameters())
    assert int(work.model.stem[1].num_batches_tracked) == 0


def test_same_seed_builds_the_same_model():
    a, b = _build("transformer"), _build("transformer")
    assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters()))


def test_gradient_checkpointing_gives_the_same_loss_and_gradients():
    plain, ckpt = _build("transformer"), _build("transformer", grad_checkpointing=True)
    assert ckpt.model.grad_checkpointing and not plain.model.grad_checkpointing
    x, y = _batch(plain.dataset)
    losses = []
    for work in (plain, ckpt):
        loss = work.loss_fn(work.model(x), y)
        loss.backward()
        losses.append(loss.item())
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)
    for p, q in zip(plain.model.parameters(), ckpt.model.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


@pytest.mark.parametrize("workload", WORKLOADS)
def test_a_few_steps_reduce_the_loss(workload):
    work = _build(workload)
    optimizer = torch.optim.AdamW(work.model.parameters(), lr=3e-3)
    x, y = _batch(work.dataset, 16)
    losses = []
    for _ in range(10):
        loss = work.loss_fn(work.model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_auto_size_is_large_on_a_gpu_and_small_elsewhere():
    from remote_runner.workloads import resolve_model_size

    assert [resolve_model_size("auto", d) for d in ("cuda", "xpu", "cpu", "mps")] == ["large", "large", "small", "small"]
    assert resolve_model_size("small", "cuda") == "small" and resolve_model_size("large", "cpu") == "large"
    assert _build("transformer").size == "small"  # this CPU: the sizes every other test here counts


def test_large_sizes_build_train_and_are_the_documented_models():
    """The size make gpu-check found a GPU needs (the small transformer left an H200 launch-bound): GPT-2 small's
    body for the transformer, counted layer by layer; every workload's large model takes a training step."""
    d, ff, layers, seq = 768, 3072, 6, 256
    per_layer = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * ff + ff) + (ff * d + d)
    expected = {"transformer": (GPT_VOCAB * d + seq * d) + layers * per_layer + 2 * d + d * GPT_VOCAB,
                "mlp": (1024 * 4096 + 4096) + 3 * (4096 * 4096 + 4096) + (4096 * 10 + 10),
                "linear": 1024 * 256 + 256}
    for workload in WORKLOADS:
        small, large = _build(workload), _build(workload, model_size="large")
        assert large.size == "large" and large.params > 10 * small.params, workload
        if workload in expected:
            assert large.params == expected[workload], workload
        x, y = _batch(large.dataset, 2)
        loss = large.loss_fn(large.model(x), y)
        loss.backward()
        assert torch.isfinite(loss), workload
        assert large.flops_per_sample > 10 * small.flops_per_sample, workload
    transformer = _build("transformer", model_size="large")
    assert transformer.tokens_per_sample == seq and transformer.dataset[0][0].shape == (seq,)
    assert 42e6 < transformer.params < 44e6  # the "43 M" the form's tooltip and the CLI's help say


def test_a_model_size_that_does_not_exist_is_refused_by_name():
    from remote_runner.config import ConfigError

    with pytest.raises(ConfigError) as refused:
        RunConfig(model_size="huge")
    assert refused.value.field == "model_size" and "huge" in str(refused.value)
