"""policy.py is pure: (settings, request) -> argv, env, launcher, fake /proc files. No root needed."""

from __future__ import annotations

import pytest

from onebox.config import SandboxSettings
from onebox.errors import PolicyViolation
from onebox.sandbox import policy
from onebox.sandbox.base import ExecRequest, Limits

LAYOUT = policy.HostLayout(
    ("/usr", "/etc/ssl/certs"), {"/bin": "usr/bin"},
    proc_read_only=("sys", "irq"), proc_masked_files=("keys", "kcore"),
    proc_masked_dirs=("acpi",),
)  # fmt: skip
STATIC_FDS = {name: 20 + i for i, name in enumerate(policy.GENERATED_FILES)}


def _spec(**kw: object) -> policy.BwrapSpec:
    limits = policy.resolve_limits(SandboxSettings(), Limits())
    values: dict[str, object] = {
        "bwrap": "/usr/bin/bwrap", "layout": LAYOUT, "workspace_fd": 11,
        "run_dir_fd": 12, "static_fds": STATIC_FDS, "limits": limits, "seccomp_fd": 7,
        "block_fd": 8, "info_fd": 9,
    }  # fmt: skip
    values.update(kw)
    return policy.BwrapSpec(**values)  # type: ignore[arg-type]


def _pairs(args: list[str], flag: str) -> list[tuple[str, str]]:
    return [(args[i + 1], args[i + 2]) for i, a in enumerate(args) if a == flag]


def test_request_limits_override_settings_defaults() -> None:
    limits = policy.resolve_limits(SandboxSettings(memory_mb=512), Limits(memory_mb=128, cpus=2))
    assert limits.memory_mb == 128 and limits.cpus == 2 and limits.cpu_count == 2
    assert limits.timeout_s == SandboxSettings().timeout_s


@pytest.mark.parametrize("field,value", [("memory_mb", 0), ("timeout_s", -1), ("pids", 0)])
def test_nonsense_limits_are_refused_with_the_field(field: str, value: float) -> None:
    with pytest.raises(PolicyViolation) as err:
        policy.resolve_limits(SandboxSettings(), Limits(**{field: value}))  # type: ignore[arg-type]
    assert err.value.field == f"limits.{field}"


def test_every_namespace_is_new_and_privileges_dropped() -> None:
    args = policy.compile_bwrap(_spec())
    for flag in ("--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                 "--unshare-net", "--disable-userns", "--die-with-parent", "--new-session"):  # fmt: skip
        assert flag in args
    assert args[args.index("--cap-drop") + 1] == "ALL"
    assert args[args.index("--seccomp") + 1] == "7"
    assert args[args.index("--block-fd") + 1] == "8"


def test_only_the_workspace_is_writable() -> None:
    args = policy.compile_bwrap(_spec())
    assert _pairs(args, "--bind") == [] and _pairs(args, "--bind-fd") == [("11", "/workspace")]
    ro = dict(_pairs(args, "--ro-bind"))
    ro_fd = dict(_pairs(args, "--ro-bind-fd"))
    assert ro["/usr"] == "/usr" and ro_fd["12"] == policy.RUN_DIR
    assert ro_fd[str(STATIC_FDS["meminfo"])] == "/proc/meminfo"
    assert "/" not in ro and "/etc" not in ro and "/root" not in ro
    remounts = [args[i + 1] for i, a in enumerate(args) if a == "--remount-ro"]
    assert remounts[-1] == "/"
    assert ("usr/bin", "/bin") in _pairs(args, "--symlink")
    assert set(policy.bind_fds(_spec())) == {11, 12, 7, *STATIC_FDS.values()}


def test_tmpfs_mounts_are_private_and_sized_from_the_limits() -> None:
    args = policy.compile_bwrap(_spec())
    sizes = {args[i + 1]: int(args[i - 1]) for i, a in enumerate(args)
             if a == "--tmpfs" and args[i - 2] == "--size"}
    limits = SandboxSettings()
    assert sizes == {"/tmp": limits.disk_mb * 2**20, "/dev/shm": limits.memory_mb * 2**20}


def test_host_wide_proc_entries_are_read_only_and_internals_masked() -> None:
    args = policy.compile_bwrap(_spec())
    ro = _pairs(args, "--ro-bind")
    assert ("/proc/sys", "/proc/sys") in ro and ("/proc/irq", "/proc/irq") in ro
    assert ("/dev/null", "/proc/keys") in ro and ("/dev/null", "/proc/kcore") in ro
    i = args.index("/proc/acpi")
    assert args[i - 1] == "--tmpfs" and args[i + 1] == "--remount-ro"
    assert args.index("--proc") < args.index("/proc/sys")  # after the sandbox's own /proc


def test_the_hosts_python_packages_are_hidden_except_for_the_environment_build() -> None:
    hidden = "/usr/lib/python3/dist-packages"
    layout = policy.HostLayout(("/usr",), package_dirs=(hidden,))
    args = policy.compile_bwrap(_spec(layout=layout))
    i = args.index(hidden)
    assert args[i - 3:i + 2] == ["--perms", "0555", "--tmpfs", hidden, "--remount-ro"]
    assert args.index("/usr") < i  # over the read-only /usr bind, not under it
    assert hidden not in policy.compile_bwrap(_spec(layout=layout, host_packages=True))


def test_command_for_languages_and_argv() -> None:
    argv, entry = policy.command_for(ExecRequest(session_id="s", code="print(1)"))
    assert argv == ["/usr/bin/python3", "/run/onebox/entry.py"] and entry == "entry.py"
    argv, entry = policy.command_for(ExecRequest(session_id="s", argv=("ls", "-l")))
    assert argv == ["ls", "-l"] and entry is None
    with pytest.raises(PolicyViolation):
        policy.command_for(ExecRequest(session_id="s"))


def test_env_is_clean_plus_request_and_proxy() -> None:
    limits = policy.resolve_limits(SandboxSettings(), Limits())
    env = policy.sandbox_env(ExecRequest(session_id="s", env={"A": "1"}), limits, proxy=True)
    assert env["A"] == "1" and env["HOME"] == "/workspace"
    assert env["HTTPS_PROXY"] == f"http://127.0.0.1:{policy.PROXY_PORT}"
    assert not any(k in env for k in ("OPENAI_API_KEY", "DATABASE_URL"))
    with pytest.raises(PolicyViolation):
        policy.sandbox_env(ExecRequest(session_id="s", env={"A=B": "1"}), limits, proxy=False)


def test_launcher_quotes_everything() -> None:
    script = policy.launcher_script(["echo", "a b; rm -rf /"], {"X": "$(id)"}, forwarder=False)
    assert "export X='$(id)'" in script
    assert script.strip().endswith("exec echo 'a b; rm -rf /'")


def test_rlimits_fall_back_without_cgroups() -> None:
    limits = policy.resolve_limits(SandboxSettings(), Limits(memory_mb=100, pids=10))
    with_cg = policy.rlimit_lines(limits, cgroups=True)
    without = policy.rlimit_lines(limits, cgroups=False)
    assert not any("-v" in line for line in with_cg)
    assert "ulimit -v 102400 || exit 125" in without and "ulimit -p 10 || exit 125" in without


def test_fake_proc_files_show_the_limits() -> None:
    assert policy.render_meminfo(256).startswith("MemTotal:         262144 kB")
    host = "processor\t: 0\nmodel name\t: X\n\nprocessor\t: 1\nmodel name\t: X\n\n"
    assert policy.render_cpuinfo(host, 1).count("processor") == 1
    assert policy.render_cpu_online(1) == "0\n" and policy.render_cpu_online(3) == "0-2\n"


def test_cpu_pinning_rotates() -> None:
    picks = [policy.pick_cpus([0, 1], 1, turn) for turn in range(4)]
    assert picks == [{0}, {1}, {0}, {1}]
    assert policy.pick_cpus([0, 1], 4, 0) == {0, 1}
