"""The test binaries of a `cargo test --no-run --message-format=json` build, one per line:
`name<TAB>kind<TAB>executable<TAB>package directory`, in cargo's order. Reads the JSON messages
on stdin. Used by scripts/test-rust, which runs them as `cargo test` would (from the package's
directory) but in lanes."""

from __future__ import annotations

import json
import os
import sys


def binaries(lines: list[str]) -> list[tuple[str, str, str, str]]:
    out: list[tuple[str, str, str, str]] = []
    for line in lines:
        if not line.startswith("{"):
            continue
        msg = json.loads(line)
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg["profile"]["test"]:
            continue  # the plain `ddptop` binary the integration tests start
        target = msg["target"]
        out.append(
            (
                target["name"],
                target["kind"][0],
                msg["executable"],
                os.path.dirname(msg["manifest_path"]),
            )
        )
    return out


if __name__ == "__main__":
    for row in binaries(sys.stdin.read().splitlines()):
        print("\t".join(row))
