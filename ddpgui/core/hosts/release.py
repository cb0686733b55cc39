"""A host profile's release action: what releases a rented instance once nothing of ddpgui is left to do.

The profile keeps a :class:`ReleasePolicy`; the host decides when (remote_runner/release.py: its watcher runs the
action when the host has been idle ``after_min`` minutes, with the laptop closed).  An action runs on the host
(``sudo shutdown -h now``) or on this computer (``sky down CLUSTER``: the host cannot run it; the app runs it when
the host says it is due).  Each action either keeps the disk (``stop``: the data waits on the stopped instance) or
destroys it (``terminate``); a destroying action waits until a client has collected every record and the outputs
the user asked to keep, unless ``destroy_uncollected_after_h`` says otherwise.  :func:`status_text` puts the
host's answer (``release-status``) in words.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from .errors import HostError, shown

ON = ("host", "local")
KINDS = ("stop", "terminate")


@dataclass(frozen=True)
class Preset:
    label: str
    command: str
    on: str
    kind: str


#: Release actions in the providers' own words.  ``CLUSTER`` is replaced by the profile's cluster name.
PRESETS: dict[str, Preset] = {
    "shutdown": Preset("Shut the machine down (sudo shutdown -h now)", "sudo shutdown -h now", "host", "stop"),
    "runpod-stop": Preset("RunPod: stop the pod", "runpodctl stop pod $RUNPOD_POD_ID", "host", "stop"),
    "runpod-remove": Preset("RunPod: remove the pod (its disk too)", "runpodctl remove pod $RUNPOD_POD_ID", "host",
                            "terminate"),
    "vast-stop": Preset("Vast.ai: stop the instance", "vastai stop instance $CONTAINER_ID", "host", "stop"),
    "vast-destroy": Preset("Vast.ai: destroy the instance (its disk too)", "vastai destroy instance $CONTAINER_ID",
                           "host", "terminate"),
    "sky-stop": Preset("SkyPilot: sky stop CLUSTER (from this computer)", "sky stop -y CLUSTER", "local", "stop"),
    "sky-down": Preset("SkyPilot: sky down CLUSTER (from this computer; its disk too)", "sky down -y CLUSTER", "local",
                       "terminate"),
}
#: Idle minutes before a release, when none is given.
DEFAULT_AFTER_MIN = 30.0


@dataclass(frozen=True)
class ReleasePolicy:
    command: str
    on: str = "host"
    kind: str = "stop"
    after_min: float = DEFAULT_AFTER_MIN
    #: For ``terminate``: destroy even if no client collected every record, this many hours after the host
    #: became idle (None: wait for a client, however long).
    destroy_uncollected_after_h: float | None = None

    def __post_init__(self) -> None:
        _check(isinstance(self.command, str) and bool(self.command.strip()) and "\n" not in self.command
               and "\0" not in self.command, "release.command", "must be one line, e.g. sudo shutdown -h now")
        _check(self.on in ON, "release.on", f"must be host or local, got {shown(self.on)}")
        _check(self.kind in KINDS, "release.kind", f"must be stop or terminate, got {shown(self.kind)}")
        _check(_number(self.after_min) and 0 <= self.after_min <= 30 * 24 * 60, "release.after_min",
               f"must be minutes from 0 to 43200 (30 days), got {shown(self.after_min)}")
        _check(self.destroy_uncollected_after_h is None or (_number(self.destroy_uncollected_after_h)
                                                            and self.destroy_uncollected_after_h >= 0),
               "release.destroy_uncollected_after_h", "must be hours >= 0, or empty to wait for a client")
        _check(self.destroy_uncollected_after_h is None or self.kind == "terminate",
               "release.destroy_uncollected_after_h", "only an action that destroys the disk (terminate) waits for "
                                                      "the records to be collected")

    @property
    def keeps_disk(self) -> bool:
        return self.kind == "stop"

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object) -> ReleasePolicy:
        if not isinstance(data, dict):
            raise HostError("release", f"must be an object (command, on, kind, after_min), got {shown(data)}")
        unknown = sorted(set(data) - {"command", "on", "kind", "after_min", "destroy_uncollected_after_h"})
        if unknown:
            raise HostError(f"release.{unknown[0]}", "unknown field")
        if "command" not in data:
            raise HostError("release.command", "a release action needs its command")
        return cls(**data)

    def for_host(self, profile_name: str) -> dict:
        """The policy as the host's watcher reads it (``release-set``)."""
        force = self.destroy_uncollected_after_h
        return {"command": self.command, "on": self.on, "kind": self.kind, "after_s": self.after_min * 60.0,
                "destroy_uncollected_after_s": None if force is None else force * 3600.0, "profile": profile_name}

    def describe(self) -> str:
        where = "on the host" if self.on == "host" else "on this computer"
        disk = "keeps the disk (a stop)" if self.keeps_disk else "destroys the disk (a terminate)"
        wait = ""
        if not self.keeps_disk:
            wait = ("; waits until every record and kept output is collected"
                    if self.destroy_uncollected_after_h is None else
                    f"; destroys what is not collected after {self.destroy_uncollected_after_h:g} h")
        return f"after {minutes_text(self.after_min)} idle, runs {self.command!r} {where}: {disk}{wait}"


def preset_policy(name: str, cluster: str = "", after_min: float = DEFAULT_AFTER_MIN) -> ReleasePolicy:
    """A preset's policy, ``CLUSTER`` replaced by ``cluster``."""
    if name not in PRESETS:
        raise HostError("release", f"no preset {shown(name)}; the presets are {', '.join(PRESETS)}")
    preset = PRESETS[name]
    command = preset.command
    if "CLUSTER" in command:
        if not cluster:
            raise HostError("release", f"the preset {name} needs the SkyPilot cluster's name (the profile's cluster)")
        command = command.replace("CLUSTER", cluster)
    return ReleasePolicy(command=command, on=preset.on, kind=preset.kind, after_min=after_min)


def minutes_text(minutes: float) -> str:
    if minutes < 1:
        return f"{minutes * 60:.0f} s"
    if minutes < 120:
        return f"{minutes:g} min"
    return f"{minutes / 60:.3g} h"


def _clock(t: float) -> str:
    return time.strftime("%H:%M", time.localtime(t)) if time.time() - t < 20 * 3600 else \
        time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def countdown_text(status: dict, now: float | None = None) -> str:
    """One short line for the host's place in the app: "releases in 12 min", "busy", "released at 03:10"..."""
    now = time.time() if now is None else now
    phase = status.get("phase")
    if phase == "idle" or phase == "failed":
        left = max(0.0, float(status.get("release_at") or now) - now)
        return f"releases in {minutes_text(round(left / 60))}" if left >= 60 else f"releases in {left:.0f} s"
    return {"off": "", "busy": "in use: no release", "collecting": "release waits for the records",
            "due": "release due now", "released": "released", "cancelled": "release cancelled until next use",
            "gave_up": "release failed"}.get(phase, phase or "")


def status_text(status: dict, price_per_hour: float | None = None, now: float | None = None) -> list[str]:
    """The host's ``release-status`` in lines a user reads (``hosts release-status``, the app's tooltip)."""
    now = time.time() if now is None else now
    policy = status.get("policy")
    if not policy:
        return ["no release action is set on the host"]
    lines = [f"release: {policy.get('command')!r} on the {'host' if policy.get('on') == 'host' else 'this computer'}"
             f" after {minutes_text(float(policy.get('after_s') or 0) / 60)} idle "
             f"({'keeps the disk' if policy.get('kind') == 'stop' else 'destroys the disk'})"]
    phase = status.get("phase")
    reasons = status.get("reasons") or []
    if phase == "busy":
        lines.append("in use, no release: " + "; ".join(reasons))
    elif phase == "collecting":
        lines.append("idle, but the release waits: " + "; ".join(reasons)
                     + " (a client that follows the runs collects them: open the app or run ddpgui adopt)")
    elif phase in ("idle", "failed"):
        lines.append(f"idle since {_clock(float(status['idle_since']))}; {countdown_text(status, now)} "
                     f"(at {_clock(float(status['release_at']))})")
    elif phase == "due":
        lines.append("due now: " + ("the host runs it within seconds" if policy.get("on") == "host" else
                                    "this computer runs it (the app does while open; or ddpgui hosts release NAME)"))
    elif phase == "cancelled":
        lines.append(f"cancelled at {_clock(float(status['cancelled_at']))}: no release until the host is used again")
    elif phase == "released":
        lines.append(f"released at {_clock(float(status['released_at']))}; nothing ran since")
    elif phase == "gave_up":
        lines.append("every try failed; no release until the host is used again or the action is set again")
    last = status.get("last")
    if last:
        when = _clock(float(last["at"]))
        if last.get("ok"):
            text = f"last release: {when}, {last.get('command')!r} succeeded"
            idle_s = now - float(last["at"])
            if price_per_hour and phase == "released":
                text += (f"; {minutes_text(round(idle_s / 60) if idle_s >= 60 else idle_s / 60)} of idle time saved since, "
                         f"{price_per_hour * idle_s / 3600:.2f} at {price_per_hour:g}/h")
        else:
            code = last.get("exit_code")
            out = " / ".join(last.get("output") or []) or "no output"
            text = (f"last release FAILED at {when}: {last.get('command')!r} "
                    f"{'ran past its time limit' if code is None else f'exited with {code}'}: {out}. "
                    "Check the command on the host (e.g. sudo needs a rule without a password), or "
                    "release it by hand")
        lines.append(text)
    if status.get("watcher") is None and phase not in ("off", "released"):
        lines.append("the host's release watcher is not running: the next launch or ddpgui hosts edit starts it")
    return lines


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check(ok: bool, field_name: str, message: str) -> None:
    if not ok:
        raise HostError(field_name, message)
