"""The parser sandbox's argv is compiled by a pure function: check what it grants."""

from __future__ import annotations

from onebox.sandbox.confined import ConfinedLimits, ConfinedSpec, compile_argv, minimal_paths

LIMITS = ConfinedLimits(timeout_s=30.0, memory_mb=512, max_output_bytes=1 << 20)
RO = ("/opt/py", "/usr", "/work/app/.venv")


def test_as_root_no_user_namespace_and_the_command_runs_as_nobody() -> None:
    argv = compile_argv(ConfinedSpec(("python", "x.py"), LIMITS, "/usr/bin/bwrap", True, RO,
                                     seccomp_fd=7))
    assert "--unshare-user" not in argv and "--unshare-all" not in argv
    assert {"--unshare-net", "--unshare-pid", "--die-with-parent", "--new-session"} <= set(argv)
    assert argv[argv.index("--seccomp") + 1] == "7"
    tail = argv[argv.index("--chdir") + 2:]
    assert tail[1:4] == ["--reuid=65534", "--regid=65534", "--clear-groups"]
    assert "--nproc=1" in tail and "--as=536870912" in tail and tail[-2:] == ["python", "x.py"]


def test_as_a_user_every_namespace_and_only_the_listed_paths() -> None:
    argv = compile_argv(ConfinedSpec(("python",), LIMITS, "/usr/bin/bwrap", False, RO))
    assert "--unshare-all" in argv and "--reuid=65534" not in " ".join(argv)
    binds = [argv[i + 1] for i, a in enumerate(argv) if a == "--ro-bind"]
    assert binds == list(RO)
    dirs = [argv[i + 1] for i, a in enumerate(argv) if a == "--dir"]
    assert dirs == ["/opt", "/work", "/work/app"]


def test_without_bubblewrap_the_same_identity_and_rlimits() -> None:
    argv = compile_argv(ConfinedSpec(("python",), LIMITS, None, True))
    assert argv[1:3] == ["--reuid=65534", "--regid=65534"]
    assert "--pdeathsig" in argv and "--nproc=1" in argv and argv[-1] == "python"


def test_minimal_paths_drops_nested_and_duplicate_paths() -> None:
    assert minimal_paths(["/usr", "/usr/lib/python3", "/a/b", "/a/b/", "/a/bc", ""]) == (
        "/a/b", "/a/bc", "/usr")
