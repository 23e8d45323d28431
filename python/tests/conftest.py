"""Shared by the package's tests: where the `ferry` binary is (for comparing with its --json)."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def ferry_bin() -> str:
    """$FERRY_BIN (the Rust test that runs this suite sets it), else a built target/*/ferry or
    one on PATH, else `cargo build --release -p ferry-cli` (minutes)."""
    env = os.environ.get("FERRY_BIN")
    if env:
        return env
    for p in (ROOT / "target/debug/ferry", ROOT / "target/release/ferry"):
        if p.is_file():
            return str(p)
    found = shutil.which("ferry")
    if found:
        return found
    # A fresh clone after `pip install ./python`: the release profile's ferry crates are built.
    cargo = shutil.which("cargo")
    if cargo is None:
        pytest.fail("no ferry binary and no cargo: set FERRY_BIN or build ferry-cli")
    subprocess.run([cargo, "build", "--release", "-q", "-p", "ferry-cli"], cwd=ROOT, check=True,
                   timeout=1800)
    return str(ROOT / "target/release/ferry")


def tool(env: str, what: str) -> str:
    """The path in $env (the Rust test that runs this suite builds it and sets it); without it
    the test is skipped, or fails under FERRY_REQUIRE_TEST_TOOLS=1."""
    path = os.environ.get(env)
    if path:
        return path
    why = f"${env} is not set ({what}; crates/ferry-cli/tests/python.rs sets it)"
    if os.environ.get("FERRY_REQUIRE_TEST_TOOLS") == "1":
        pytest.fail(why)
    pytest.skip(why)
