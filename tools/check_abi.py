#!/usr/bin/env python3
"""Checks that the three statements of the C API agree: the prototypes in
include/voicecat.h, the @_cdecl exports in Sources/VoiceCatImpl, and the Python
binding's prototype table (`_protos` in the binding's _lib module): the same
functions, the same number of arguments, and the same types (argument and result),
compared after mapping each language's spelling to one canonical form.

Then it holds the API to its ABI policy (include/voicecat.h) against the last
release's layouts and prototypes (tools/abi-baseline.json):
  * every function of the release is still there with the same prototype;
  * every struct of the release keeps its fields where they were (fields are only
    appended); the layouts are the Python binding's, which the binding checks
    against the library's vc_struct_size when it loads;
  * a struct that grew (a field appended, even into former padding) has, for every
    function that takes or fills it, a version of the function for the release's
    layout (`name@VOICECAT_0`) beside the new default one (read from the library's
    dynamic symbols, VOICECAT_LIBRARY);
  * every function added since is exported under a newer version node than the
    release's, so a program that uses it fails to load on an older library with a
    clear message instead of failing at the call.

    check_abi.py HEADER SWIFT_DIR PYTHON_PACKAGE_PARENT [BASELINE]
    check_abi.py --write-baseline BASELINE RELEASE NODE HEADER PYTHON_PACKAGE_PARENT   (at a release)

The Python module is imported (it loads the library: set VOICECAT_LIBRARY).
Prints each disagreement and "N passed, M failed"; exits non-zero on any.
"""
import importlib
import json
import os
import re
import subprocess
import sys

ENUMS = {"vc_device_kind", "vc_input_mode", "vc_stream_kind", "vc_channel_mode", "vc_opus_application", "vc_event_type"}
FNS = {"vc_log_fn", "vc_event_fn", "vc_pcm_sink_fn", "vc_remote_stream_sink_fn"}


def canon_c(t):
    t = t.replace("const", " ").strip()
    stars = t.count("*")
    base = t.replace("*", " ").split()
    base = base[-1] if base else ""
    scalar = {"int": "int32", "int32_t": "int32", "uint32_t": "uint32", "uint16_t": "uint16", "int16_t": "int16",
              "uint64_t": "uint64", "int64_t": "int64", "size_t": "size", "float": "float", "double": "double",
              "char": "char", "void": "void", "uint8_t": "uint8"}
    if base in ENUMS and stars == 0:
        return "enum"
    return scalar.get(base, base) + "*" * stars


def parse_header(path):
    text = open(path).read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    out = {}
    for m in re.finditer(r"([A-Za-z_][\w \*]*?)\b(vc_\w+)\s*\(([^;{}]*?)\)\s*;", text):
        ret, name, params = m.group(1), m.group(2), m.group(3)
        if "typedef" in ret or "(*" in m.group(0):
            continue
        params = params.strip()
        args = []
        if params and params != "void":
            for p in params.split(","):
                p = p.strip()
                p = re.sub(r"\b\w+$", "", p) if re.search(r"[\w\*]\s*\b\w+$", p) and len(p.replace("*", " ").split()) > 1 else p
                args.append(canon_c(p))
        out[name] = (canon_c(ret.strip()), args)
    return out


def canon_swift(t):
    t = t.strip()
    m = re.fullmatch(r"(UnsafeMutablePointer|UnsafePointer)<(.+)>\??", t)
    if m:
        return canon_swift(m.group(2)) + "*"
    t = t.rstrip("?")
    scalar = {"Int32": "int32", "UInt32": "uint32", "UInt16": "uint16", "Int16": "int16", "UInt64": "uint64",
              "Int64": "int64", "Int": "size", "Float": "float", "Double": "double", "CChar": "char", "UInt8": "uint8",
              "OpaquePointer": "vc_client*", "UnsafeMutableRawPointer": "void*", "UnsafeRawPointer": "void*",
              "Void": "void", "()": "void"}
    if t in ENUMS:
        return "enum"
    return scalar.get(t, t)


def split_args(s):
    depth, cur, out = 0, "", []
    for ch in s:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return out


def parse_swift(directory):
    out = {}
    for fn in sorted(os.listdir(directory)):
        if not fn.endswith(".swift"):
            continue
        text = open(os.path.join(directory, fn)).read()
        for m in re.finditer(r'@_cdecl\("(vc_\w+)"\)\s*public func (\w+)\((.*?)\)\s*(->\s*([^{]+?))?\s*\{', text, flags=re.S):
            name, params, ret = m.group(1), m.group(3), m.group(5)
            args = []
            for p in split_args(params):
                p = p.strip()
                if not p:
                    continue
                args.append(canon_swift(p.split(":", 1)[1]))
            out[name] = (canon_swift(ret) if ret else "void", args)
    return out


def parse_python(parent):
    sys.path.insert(0, parent)
    lib = importlib.import_module("voicecat._lib")
    import ctypes
    fn_names = {}
    for n in ("LOG_FN", "EVENT_FN", "SINK_FN", "STREAM_SINK_FN"):
        if hasattr(lib, n):
            fn_names[id(getattr(lib, n))] = {"LOG_FN": "vc_log_fn", "EVENT_FN": "vc_event_fn", "SINK_FN": "vc_pcm_sink_fn",
                                             "STREAM_SINK_FN": "vc_remote_stream_sink_fn"}[n]

    def canon(t, top=True):
        if t is None:
            return "void"
        if id(t) in fn_names:
            return fn_names[id(t)]
        scalar = {ctypes.c_int: "int32", ctypes.c_int32: "int32", ctypes.c_uint32: "uint32", ctypes.c_uint16: "uint16",
                  ctypes.c_int16: "int16", ctypes.c_uint64: "uint64", ctypes.c_int64: "int64", ctypes.c_size_t: "size",
                  ctypes.c_float: "float", ctypes.c_double: "double", ctypes.c_char_p: "char*", ctypes.c_void_p: "void*",
                  ctypes.c_char: "char", ctypes.c_uint8: "uint8"}
        if t in scalar:
            return scalar[t]
        if hasattr(t, "_type_") and isinstance(t, type) and issubclass(t, ctypes._Pointer):
            return canon(t._type_, top=False) + "*"
        return t.__name__
    out = {}
    for name, restype, argtypes in lib._protos:
        out[name] = (canon(restype), [canon(a) for a in argtypes])
    return out


def same(a, b):
    """int32 and enum are one ABI type (Python passes enums as c_int)."""
    norm = lambda x: "int32" if x == "enum" else x
    return norm(a) == norm(b)


def layouts(py_parent):
    """{struct: {"size", "fields": [[name, offset, size], ...]}} of the Python binding."""
    sys.path.insert(0, py_parent)
    lib = importlib.import_module("voicecat._lib")
    import ctypes
    out = {}
    for name, cls in lib._STRUCTS.items():
        out[name] = {"size": ctypes.sizeof(cls),
                     "fields": [[f, getattr(cls, f).offset, getattr(cls, f).size] for f, _ in cls._fields_]}
    return out


def exported_versions(library):
    """{function: {version: is_default}} from the library's dynamic symbol table."""
    run = subprocess.run(["readelf", "--dyn-syms", "--wide", library], capture_output=True, text=True, check=True)
    out = {}
    for line in run.stdout.splitlines():
        parts = line.split()
        if len(parts) < 8 or parts[3] != "FUNC" or parts[6] == "UND":
            continue
        m = re.fullmatch(r"(vc_\w+)(@@?)(\S+)", parts[7])
        if m:
            out.setdefault(m.group(1), {})[m.group(3)] = m.group(2) == "@@"
    return out


def mentions(proto, struct):
    """True when a canonical prototype takes or returns `struct` (by value or pointer)."""
    ret, args = proto
    return any(t.rstrip("*") == struct for t in [ret] + list(args))


def check_policy(baseline_path, h, py_parent, problems):
    """The ABI policy against the last release; returns (passed, failed)."""
    base = json.load(open(baseline_path))
    node = base["version_node"]
    now = layouts(py_parent)
    library = os.environ.get("VOICECAT_LIBRARY")
    versions = exported_versions(library) if library else None
    passed = failed = 0

    def verdict(ok, text):
        nonlocal passed, failed
        if ok:
            passed += 1
        else:
            failed += 1
            problems.append(text)

    for name, proto in sorted(base["functions"].items()):
        current = h.get(name)
        verdict(current is not None and current[0] == proto[0] and list(current[1]) == list(proto[1]),
                f"{name}: release {base['release']} has {proto}, now {current} (functions never change or go)")
    for name, old in sorted(base["structs"].items()):
        new = now.get(name)
        if new is None:
            verdict(False, f"{name}: in release {base['release']}, gone now")
            continue
        n = len(old["fields"])
        verdict(new["fields"][:n] == old["fields"],
                f"{name}: fields of release {base['release']} {old['fields']} are now {new['fields'][:n]} "
                "(fields are only appended)")
        # A field appended in what was padding grows no size, but an old program's padding
        # holds anything: it is growth all the same.
        if len(new["fields"]) == n:
            continue
        grown = f"{name} grew ({', '.join(f[0] for f in new['fields'][n:])} appended)"
        users = [f for f, proto in sorted(h.items()) if f in base["functions"] and mentions(proto, name)]
        if versions is None:
            problems.append(f"{grown}: set VOICECAT_LIBRARY to check the versions of " + ", ".join(users))
            failed += 1
            continue
        for f in users:
            have = versions.get(f, {})
            verdict(node in have and not have[node] and any(d for v, d in have.items() if v != node),
                    f"{f}: {grown}, so {f} needs {f}@{node} for the release's layout beside a newer default "
                    f"version; the library has {have or 'none'}")
    if versions is not None:
        for f in sorted(set(h) - set(base["functions"])):
            have = versions.get(f, {})
            default = [v for v, d in have.items() if d]
            verdict(bool(default) and default[0] != node,
                    f"{f}: added after release {base['release']}, so it belongs to a newer version node than {node} "
                    f"(tools/libvoicecat.map); the library exports {have or 'nothing'}")
    return passed, failed


def write_baseline(path, release, node, header, py_parent):
    h = parse_header(header)
    structs = layouts(py_parent)
    lines = ["{", f' "release": {json.dumps(release)},', f' "version_node": {json.dumps(node)},', ' "structs": {']
    items = sorted(structs.items())
    lines += [f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" + ("," if i < len(items) - 1 else "")
              for i, (k, v) in enumerate(items)]
    lines += [" },", ' "functions": {']
    items = sorted(h.items())
    lines += [f"  {json.dumps(k)}: {json.dumps([v[0], v[1]])}" + ("," if i < len(items) - 1 else "")
              for i, (k, v) in enumerate(items)]
    lines += [" }", "}"]
    open(path, "w").write("\n".join(lines) + "\n")
    print(f"check_abi: wrote {path}: {len(structs)} structs, {len(h)} functions of release {release} ({node})")
    return 0


def main():
    if sys.argv[1:2] == ["--write-baseline"]:
        return write_baseline(*sys.argv[2:7])
    header, swift_dir, py_parent = sys.argv[1:4]
    h, s, p = parse_header(header), parse_swift(swift_dir), parse_python(py_parent)
    passed = failed = 0
    problems = []
    for name in sorted(set(h) | set(s) | set(p)):
        where = [w for w, d in (("header", h), ("swift", s), ("python", p)) if name not in d]
        if where:
            problems.append(f"{name}: missing from {', '.join(where)}")
            failed += 1
            continue
        (hr, ha), (sr, sa), (pr, pa) = h[name], s[name], p[name]
        ok = True
        for label, (r, a) in (("swift", (sr, sa)), ("python", (pr, pa))):
            if len(a) != len(ha):
                problems.append(f"{name}: {label} has {len(a)} arguments, the header {len(ha)}")
                ok = False
                continue
            if not same(r, hr) and not (label == "python" and hr.endswith("*") and r in ("void*", "char*") and hr in ("char*",)):
                problems.append(f"{name}: {label} returns {r}, the header {hr}")
                ok = False
            for i, (x, y) in enumerate(zip(a, ha)):
                # ctypes spells every handle and opaque pointer c_void_p.
                if label == "python" and x.startswith("void*") and x.count("*") == y.count("*"):
                    continue
                if not same(x, y):
                    problems.append(f"{name}: argument {i + 1} is {x} in {label}, {y} in the header")
                    ok = False
        if ok:
            passed += 1
        else:
            failed += 1
    if len(sys.argv) > 4:
        bp, bf = check_policy(sys.argv[4], h, py_parent, problems)
        passed += bp
        failed += bf
    for line in problems:
        print("check_abi:", line)
    print(f"check_abi: {len(h)} functions in the header, {len(s)} Swift exports, {len(p)} Python prototypes")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
