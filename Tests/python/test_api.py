"""The public surface: every name documented, codes as IntEnums, values as dataclasses."""
import dataclasses
import enum
import inspect
import os
import re

import voicecat
from voicecat import cli

from conftest import ROOT


def _public_members(cls):
    for name, member in vars(cls).items():
        if name.startswith("_") and name not in ("__init__",):
            continue
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        if isinstance(member, property):
            yield name, member.fget
        elif inspect.isfunction(member):
            yield name, member


def test_every_public_name_has_a_docstring():
    undocumented = []
    for module in (voicecat, cli):
        if not inspect.getdoc(module):
            undocumented.append(module.__name__)
    names = [(n, getattr(voicecat, n)) for n in voicecat.__all__] + \
            [(f"cli.{n}", getattr(cli, n)) for n in ("main", "build_parser", "ExitCode")]
    for name, obj in names:
        if inspect.isclass(obj) or inspect.isfunction(obj):
            if not (obj.__doc__ or "").strip():
                undocumented.append(name)
        if inspect.isclass(obj) and not issubclass(obj, enum.Enum):
            for member_name, member in _public_members(obj):
                if member_name == "__init__" and (obj.__init__.__doc__ or obj.__doc__):
                    continue
                if not (member.__doc__ or "").strip():
                    undocumented.append(f"{name}.{member_name}")
    assert undocumented == []


def _header_values(prefix):
    """NAME -> value of the header's #defines and enum constants starting with `prefix`."""
    text = open(os.path.join(ROOT, "include", "voicecat.h")).read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    values = {m.group(1): int(m.group(2)) for m in re.finditer(rf"#define ({prefix}\w+)\s+(-?\d+)\b", text)}
    values.update({m.group(1): int(m.group(2)) for m in re.finditer(rf"\b({prefix}\w+)\s*=\s*(-?\d+)", text)})
    return {name[len(prefix):]: value for name, value in values.items()}


def test_codes_kinds_modes_and_events_are_int_enums_with_the_headers_values():
    errors = _header_values("VC_ERR_")
    errors["OK"] = 0
    expected = {voicecat.ErrorCode: errors, voicecat.StreamKind: _header_values("VC_STREAM_"),
                voicecat.ChannelMode: _header_values("VC_MODE_"), voicecat.OpusApplication: _header_values("VC_APP_"),
                voicecat.InputMode: _header_values("VC_INPUT_"), voicecat.DeviceKind: _header_values("VC_DEVICE_"),
                voicecat.EventType: _header_values("VC_EVENT_")}
    for enum_type, values in expected.items():
        assert issubclass(enum_type, enum.IntEnum)
        assert {m.name: m.value for m in enum_type} == values, enum_type.__name__


def test_values_are_dataclasses():
    for cls in (voicecat.Event, voicecat.StreamStats, voicecat.ConnectionStats, voicecat.RemoteStreamInfo,
                voicecat.RemoteStreamSettings, voicecat.AudioConfig, voicecat.SendProcessing, voicecat.DeviceInfo):
        assert dataclasses.is_dataclass(cls), cls
