"""The package as installed: where it and the library come from, and what the bundled
library needs from the machine."""
import ctypes
import os
import re
import shutil
import subprocess
import sys

import pytest

import voicecat
from voicecat import _lib

from conftest import INSTALL, ROOT, run_python

PACKAGE_DIR = os.path.dirname(os.path.abspath(voicecat.__file__))
BUNDLED = os.path.join(PACKAGE_DIR, "_bundled", "libvoicecat.so.0")
# What a Debian 12 machine needs for the bundled library: libopus, libsodium, SpeexDSP
# and ALSA runtime packages, and the C/C++ runtime every Debian system has.
DEBIAN_RUNTIME = {"libopus0", "libsodium23", "libspeexdsp1", "libasound2", "libc6", "libgcc-s1", "libstdc++6"}


def test_the_installed_package_is_imported_not_the_checkout():
    if not INSTALL:
        pytest.skip("not run from an installed environment (make py-test)")
    assert "site-packages" in PACKAGE_DIR, PACKAGE_DIR
    assert not PACKAGE_DIR.startswith(os.path.join(ROOT, "python"))
    assert os.path.isfile(os.path.join(PACKAGE_DIR, "py.typed")), "py.typed is installed (PEP 561)"


def test_the_wheel_environment_really_has_no_numpy():
    if INSTALL != "wheel":
        pytest.skip("only the wheel environment is made without numpy")
    assert not voicecat.has_numpy()
    with pytest.raises(ImportError):
        import numpy  # noqa: F401


def test_versions_agree_with_the_header():
    header = open(os.path.join(ROOT, "include", "voicecat.h")).read()
    parts = [re.search(rf"#define VC_VERSION_{p}\s+(\d+)", header).group(1) for p in ("MAJOR", "MINOR", "PATCH")]
    assert voicecat.version() == ".".join(parts)
    assert voicecat.__version__ == ".".join(parts), "bump python/pyproject.toml and voicecat.__version__ with the API"
    assert voicecat.version_number() == (int(parts[0]) << 16) | (int(parts[1]) << 8) | int(parts[2])
    assert _lib.BINDING_VERSION == tuple(int(p) for p in parts)


def test_the_library_is_found_where_this_installation_says():
    path = voicecat.library_path()
    how = _lib.loaded_from()[1]
    if INSTALL == "wheel":
        assert (path, how) == (BUNDLED, "bundled")
    elif INSTALL == "source":
        assert not os.path.exists(BUNDLED), "pip install ./python bundles nothing"
        assert how == "pkg-config"
        assert path == os.path.join(os.environ["PKG_CONFIG_PATH"].split(":")[0].rsplit("/pkgconfig", 1)[0],
                                    "libvoicecat.so.0")
    else:
        assert os.path.exists(path)


def test_struct_layouts_match_and_every_prototype_resolves():
    lib = _lib.get()
    for name, cls in _lib._STRUCTS.items():
        assert lib.vc_struct_size(name.encode()) == ctypes.sizeof(cls), name
    for name, restype, argtypes in _lib._protos:
        assert getattr(lib, name).argtypes == list(argtypes)


def test_the_bundled_library_needs_only_debian_runtime_packages():
    if INSTALL != "wheel":
        pytest.skip("only the wheel bundles the library")
    dynamic = subprocess.run(["readelf", "-d", BUNDLED], capture_output=True, text=True, check=True).stdout
    runpath = re.findall(r"R(?:UN)?PATH.*\[(.*)\]", dynamic)
    assert runpath in ([], ["$ORIGIN"]), runpath
    ldd = subprocess.run(["ldd", BUNDLED], capture_output=True, text=True, check=True).stdout
    assert "not found" not in ldd, ldd
    packages = set()
    for path in re.findall(r"=> (/\S+)", ldd):
        owner = subprocess.run(["dpkg", "-S", os.path.realpath(path)], capture_output=True, text=True)
        if owner.returncode != 0:  # merged /usr: dpkg may know the other spelling
            owner = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True, check=True)
        packages.add(owner.stdout.split(":")[0])
    assert packages <= DEBIAN_RUNTIME, packages - DEBIAN_RUNTIME
    assert {"libopus0", "libsodium23", "libspeexdsp1", "libasound2"} <= packages
    # And in this process: nothing from a build tree or the Swift toolchain is mapped.
    maps = open("/proc/self/maps").read()
    assert "/opt/swift" not in maps
    assert [line for line in maps.splitlines() if "libvoicecat" in line and BUNDLED not in line] == []


def test_voicecat_library_and_an_explicit_path_come_first(tmp_path):
    first, second = tmp_path / "a" / "libvoicecat.so.0", tmp_path / "b" / "libvoicecat.so.0"
    for copy in (first, second):
        copy.parent.mkdir()
        shutil.copyfile(voicecat.library_path(), copy)
    env = dict(os.environ, VOICECAT_LIBRARY=str(first))
    out = run_python("import voicecat; print(voicecat.library_path(), voicecat.version())", env=env)
    assert out.stdout.split() == [str(first), voicecat.version()]
    env["VOICECAT_LIBRARY"] = str(tmp_path / "nowhere.so")
    out = run_python(f"import voicecat; print(voicecat.load_library({str(second)!r}))", env=env)
    assert out.stdout.strip() == str(second)
    out = run_python(f"import voicecat; voicecat.load_library({str(second)!r}); voicecat.load_library({str(first)!r})",
                     env=env, check=False)
    assert out.returncode != 0 and "already loaded" in out.stderr


def test_a_library_that_is_not_there_is_a_clear_error(tmp_path):
    env = dict(os.environ, VOICECAT_LIBRARY=str(tmp_path / "missing.so"))
    out = run_python("import voicecat\ntry:\n    voicecat.version()\nexcept voicecat.LibraryError as e:\n    print(e)",
                     env=env)
    assert "cannot load libvoicecat from" in out.stdout and "missing.so" in out.stdout
    cli = subprocess.run([sys.executable, "-m", "voicecat", "devices"], env=env, capture_output=True, text=True)
    assert cli.returncode == 8 and "missing.so" in cli.stderr


def test_the_command_is_installed_and_runs_as_a_module():
    script = shutil.which("voicecat", path=os.path.dirname(sys.executable))
    if INSTALL:
        assert script is not None, "pip installs the voicecat console script"
        out = subprocess.run([script, "--version"], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == f"voicecat {voicecat.__version__}"
    out = subprocess.run([sys.executable, "-m", "voicecat", "--help"], capture_output=True, text=True, check=True)
    for command in ("speak", "record", "devices", "stats", "ping"):
        assert command in out.stdout
    assert "exit status" in out.stdout


def test_a_library_that_is_not_libvoicecat_is_named_so():
    import ctypes.util
    other = ctypes.util.find_library("m")
    assert other, "libm is on every system"
    env = dict(os.environ, VOICECAT_LIBRARY=other)
    out = run_python("import voicecat\ntry:\n    voicecat.version()\nexcept voicecat.LibraryError as e:\n    print(e)",
                     env=env)
    assert "is not libvoicecat" in out.stdout and "older" not in out.stdout, out.stdout
