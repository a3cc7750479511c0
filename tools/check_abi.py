#!/usr/bin/env python3
"""Checks that the three statements of the C API agree: the prototypes in
include/voicecat.h, the @_cdecl exports in Sources/VoiceCatImpl, and the Python
binding's prototype table (`_protos` in the binding's _lib module): the same
functions, the same number of arguments, and the same types (argument and result),
compared after mapping each language's spelling to one canonical form.

    check_abi.py HEADER SWIFT_DIR PYTHON_PACKAGE_PARENT

The Python module is imported (it loads the library: set VOICECAT_LIBRARY).
Prints each disagreement and "N passed, M failed"; exits non-zero on any.
"""
import importlib
import os
import re
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


def main():
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
    for line in problems:
        print("check_abi:", line)
    print(f"check_abi: {len(h)} functions in the header, {len(s)} Swift exports, {len(p)} Python prototypes")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
