"""Captured GPU output (tests/fixtures/gpu) and the fake NVML module that replays it."""
import importlib.util
from pathlib import Path

GPU_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"


def _load_fake_pynvml():
    spec = importlib.util.spec_from_file_location("fake_pynvml", GPU_FIXTURES / "fake_pynvml.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fake_pynvml_fixture = _load_fake_pynvml()
