"""Launching a run from a real main window's launch panel, as a user does."""


def launch_from_panel(window, qtbot, steps: int, nproc: int = 2, workload: str = "mlp", compile_mode: str = "off",
                      batch: int = 8, timeout_ms: int = 90_000) -> str:
    """Fill the launch form (fp32, ``steps`` steps), press Launch, and return the run id the dashboard shows."""
    panel = window.launch_panel
    panel.workload.setCurrentText(workload)
    panel.nproc.setValue(nproc)
    panel.compile.setCurrentText(compile_mode)
    panel.precision.setCurrentText("fp32")
    panel.batch.setValue(batch)
    panel.length_unit.setCurrentText("steps")
    panel.length.setValue(steps)
    assert panel.launch_button.isEnabled(), panel.error.text()
    before = window.dashboard.run_id
    panel.launch_button.click()
    qtbot.waitUntil(lambda: window.dashboard.run_id not in (None, before), timeout=timeout_ms)
    return window.dashboard.run_id
