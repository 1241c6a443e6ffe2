#!/usr/bin/env python3
"""Append the ragen-gym plugin manifest to a WebAssembly component as a custom section.

Usage: add_manifest.py IN.wasm MANIFEST.json OUT.wasm

A custom section is id 0, the LEB128 size of its contents, then the contents: the LEB128 length
of the name, the UTF-8 name (`ragen:plugin`, the SDK's MANIFEST_SECTION) and the payload (the
manifest JSON). Custom sections may appear anywhere at the top level of a module or component,
so appending one at the end keeps the binary valid. Standard library only.
"""

import json
import sys

SECTION_NAME = "ragen:plugin"
WASM_MAGIC = b"\0asm"


def leb128(n: int) -> bytes:
    """Unsigned LEB128 encoding of n."""
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def custom_section(name: str, payload: bytes) -> bytes:
    """The bytes of one custom section (id 0) named `name` holding `payload`."""
    name_bytes = name.encode("utf-8")
    contents = leb128(len(name_bytes)) + name_bytes + payload
    return b"\x00" + leb128(len(contents)) + contents


def main(argv):
    if len(argv) != 4:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    wasm_path, manifest_path, out_path = argv[1:]
    with open(wasm_path, "rb") as f:
        wasm = f.read()
    if not wasm.startswith(WASM_MAGIC):
        print(f"{wasm_path}: not a WebAssembly binary", file=sys.stderr)
        return 1
    with open(manifest_path, "rb") as f:
        manifest = f.read()
    try:
        parsed = json.loads(manifest)
    except ValueError as e:
        print(f"{manifest_path}: invalid JSON: {e}", file=sys.stderr)
        return 1
    for key in ("id", "version", "interface_version", "kind"):
        if key not in parsed:
            print(f"{manifest_path}: missing field `{key}`", file=sys.stderr)
            return 1
    payload = json.dumps(parsed, separators=(",", ":")).encode("utf-8")
    tmp = out_path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(wasm + custom_section(SECTION_NAME, payload))
    import os

    os.replace(tmp, out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
