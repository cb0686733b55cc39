"""Marking the launch form's control at fault: its label red, the refusal (and its hint) as its tooltip.

A mixin of :class:`~ddpgui.ui.widgets.launch_panel.LaunchPanel` (it uses the panel's form and controls):
:meth:`FieldMarks.field_widget` finds the control a config field, or one of
:func:`~ddpgui.core.slurm.partitions.request_problems`' fields, is shown on; :meth:`FieldMarks._mark` marks it
(``None`` clears the mark) and sets ``invalid_field``.
"""
from __future__ import annotations

from PySide6.QtWidgets import QFormLayout, QLabel, QWidget

_INVALID_LABEL = "color: #d93025; font-weight: 600;"
#: Where a refused request is shown: the control of the field (the partition's limits line for the profile's own).
_PROFILE_FIELDS = ("time_limit", "gpus_per_node", "partition")


class FieldMarks:
    """The marking of :class:`LaunchPanel`'s refused control."""

    def field_widget(self, field: str | None) -> QWidget | None:
        """The control that shows ``field`` (a config field or one of request_problems'): the profile's own
        Slurm settings are shown, and refused, on the partition's limits line."""
        field = (field or "").removeprefix("slurm.")
        if field in _PROFILE_FIELDS and self.cluster is not None:
            return self.limits
        return {"nnodes": self.nnodes if self.cluster is not None else None, "nproc_per_node": self.nproc,
                "batch_size": self.batch, "steps": self.length, "epochs": self.length, "minutes": self.length,
                "precision": self.precision, "compile": self.compile, "gpus": self.gpu_picker.mode,
                "name": self.name, "tags": self.tags}.get(field)

    def _mark(self, field: str | None, message: str = "", hint: str = "") -> None:
        """Mark the control at fault (its label red, the message as its tooltip); ``None`` clears the mark."""
        old, self._marked = self._marked, None
        if old is not None:
            old.setProperty("invalid", False)
            old.setToolTip(self.limits.text() if old is self.limits else old.property("plain_tip") or "")
            old.setStyleSheet("")
            label = self._label_of(old)
            if label is not None:
                label.setStyleSheet("")
        widget = self.field_widget(field)
        self.invalid_field = field if widget is not None else None
        if widget is None:
            return
        if widget.property("plain_tip") is None:
            widget.setProperty("plain_tip", widget.toolTip())
        self._marked = widget
        widget.setProperty("invalid", True)
        widget.setToolTip(message + (f"\nHint: {hint}" if hint else ""))
        label = self._label_of(widget)
        if label is not None:
            label.setStyleSheet(_INVALID_LABEL)
        elif widget is self.limits:
            widget.setStyleSheet(_INVALID_LABEL)

    def _label_of(self, widget: QWidget) -> QLabel | None:
        """The form's label of the row ``widget`` is in (alone or in the row's layout)."""
        for row in range(self.form.rowCount()):
            item = self.form.itemAt(row, QFormLayout.ItemRole.FieldRole)
            if item is not None and (item.widget() in (widget, widget.parentWidget()) or
                                     (item.layout() and item.layout().indexOf(widget) >= 0)):
                label = self.form.itemAt(row, QFormLayout.ItemRole.LabelRole)
                return label.widget() if label is not None and isinstance(label.widget(), QLabel) else None
        return None
