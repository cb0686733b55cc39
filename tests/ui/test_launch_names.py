"""The launch form refuses a run name or a tag the CLI's --name and --tag refuse (ddpgui.core.names), on the
control at fault, before anything is launched."""
from ddpgui.ui.widgets.launch_panel import LaunchPanel


def test_a_name_or_tag_the_cli_refuses_disables_launch_and_marks_its_field(qtbot):
    panel = LaunchPanel()
    qtbot.addWidget(panel)
    panel.show()
    assert panel.launch_button.isEnabled()
    panel.name.setText("x" * 201)
    assert not panel.launch_button.isEnabled()
    assert panel.error.text() == "the name is 201 characters long (at most 200)"
    assert panel.name.property("invalid") and "at most 200" in panel.name.toolTip()
    panel.name.setText("x" * 200)
    assert panel.launch_button.isEnabled() and not panel.name.property("invalid")
    panel.tags.setText("baseline, " + "t" * 250)
    assert not panel.launch_button.isEnabled()
    assert panel.error.text() == "the tag is 250 characters long (at most 200)"
    assert panel.tags.property("invalid")
    panel.tags.setText("baseline, bf16")
    assert panel.launch_button.isEnabled() and panel.settings()["tags"] == ["baseline", "bf16"]
