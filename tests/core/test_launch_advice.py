"""The launch form's advice under a valid run (ddpgui/core/runs/advice.py): said only where the host is known."""
from ddpgui.core.runs.advice import launch_advice


def test_a_small_global_batch_on_gpus_is_advised_against():
    assert "global batch of 16 is small for 2 GPUs" in launch_advice({"workload": "mlp"}, 2, 16, gpus=True)
    assert launch_advice({"workload": "mlp"}, 2, 64, gpus=True) == ""
    assert launch_advice({"workload": "mlp"}, 2, 16, gpus=False) == ""  # CPU processes: gloo, no such wait


def test_the_large_model_on_a_host_known_to_have_no_gpu_is_advised_against():
    large = {"workload": "transformer", "model_size": "large"}
    assert "sized for a GPU" in launch_advice(large, 1, 32, gpus=False)
    assert launch_advice(large, 1, 32, gpus=None) == ""  # not probed yet: it may have one
    assert launch_advice(large, 1, 32, gpus=True) == ""
    assert launch_advice(dict(large, model_size="auto"), 1, 32, gpus=False) == ""
    assert launch_advice({"mode": "script", "model_size": "large"}, 1, 32, gpus=False) == ""  # a script ignores it
