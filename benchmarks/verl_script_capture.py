"""Run a verl example script under bash with stand-in commands and capture the arguments it gives
`verl.trainer.main_ppo`: line continuations, variables with defaults, arrays, `$@` and env vars are expanded
by bash itself, exactly as when the script runs.

The stand-ins: `python`, `python3`, `uv`, `torchrun`, `ray`, ... record their arguments when they launch
`verl.trainer.main_ppo` (`-m verl.trainer.main_ppo` or `verl/trainer/main_ppo.py`) and otherwise do nothing
(`python3 -c 'import torch_npu'` fails, so scripts pick their GPU branch); `nvidia-smi` reports 8 GPUs.
PATH holds only the stand-ins and a few text tools (date, dirname, sed, ...); any other command (`rm`,
`pip`, `git`, `wget`, ...) runs bash's command-not-found handler, which does nothing, so a script cannot
change anything outside its working copy (export verl with `git archive` into a temporary folder first).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

LAUNCHER = "verl.trainer.main_ppo"
LAUNCHER_NAME = re.compile(r"verl[./]trainer[./]main_ppo(?![\w])(?!\.[a-z])")  # not main_ppo_sync
STANDINS = ("python", "python3", "uv", "torchrun", "ray", "deepspeed", "accelerate", "srun", "mpirun", "nohup",
            "timeout", "env")
TEXT_TOOLS = ("date", "dirname", "basename", "realpath", "readlink", "cat", "expr", "seq", "tr", "cut", "head",
              "tail", "grep", "sed", "awk", "wc", "sort", "uniq", "printf", "echo", "true", "false", "hostname",
              "uname", "id", "whoami", "bc", "xargs", "test", "ls", "pwd", "bash", "sh")
STANDIN = """#!/bin/bash
# Records the arguments after verl.trainer.main_ppo; anything else succeeds silently.
for ((i = 1; i <= $#; i++)); do
  arg="${!i}"
  if [[ "$arg" == "verl.trainer.main_ppo" || "$arg" == *verl/trainer/main_ppo.py ]]; then
    n=$(ls "$CAPTURE_DIR" | wc -l)
    printf '%s\\0' "${@:i+1}" > "$CAPTURE_DIR/$n.args"
    exit 0
  fi
done
for arg in "$@"; do [[ "$arg" == "-c" ]] && exit 1; done  # probes such as `python3 -c 'import torch_npu'`
exit 0
"""
NVIDIA_SMI = """#!/bin/bash
for i in 0 1 2 3 4 5 6 7; do
  if [[ "$*" == *"-L"* ]]; then echo "GPU $i: NVIDIA H200 (UUID: GPU-$i)"; else echo "$i"; fi
done
"""
NPROC = "#!/bin/bash\necho 64\n"
TEE = "#!/bin/bash\ncat\n"  # passes its input on (a log file is not written: a missing reader would break the pipe)
# bash functions that shadow what a sandbox cannot do: unknown commands, raising limits, sourcing site files
PRELUDE = ("command_not_found_handle() { return 0; }; export -f command_not_found_handle; "
           "ulimit() { return 0; }; "
           "source() { local file=\"$1\"; shift; if [[ -f \"$file\" ]]; then builtin source \"$file\" \"$@\"; fi; }; ")
PLACEHOLDER_ATTEMPTS = 8


@dataclass
class Capture:
    """What one script run gave `verl.trainer.main_ppo` (one entry per launch; a script may launch several)."""

    script: str
    launches: list[list[str]] = field(default_factory=list)
    returncode: int = 0
    stderr_tail: str = ""
    placeholders: dict[str, str] = field(default_factory=dict)


def _write_exec(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def _standin_bin(folder: Path) -> Path:
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in STANDINS:
        _write_exec(bin_dir / name, STANDIN)
    _write_exec(bin_dir / "nvidia-smi", NVIDIA_SMI)
    _write_exec(bin_dir / "nproc", NPROC)
    _write_exec(bin_dir / "tee", TEE)
    for name in TEXT_TOOLS:
        real = shutil.which(name)
        if real and not (bin_dir / name).exists():
            (bin_dir / name).symlink_to(real)
    return bin_dir


def placeholder(name: str, home: Path) -> str:
    """A value for an environment variable a script requires but does not default (what its user would set)."""
    upper = name.upper()
    if any(part in upper for part in ("NUM", "NNODES", "NODES", "GPUS", "WORLD", "RANK", "PORT", "SIZE")):
        return "1"
    if "BACKEND" in upper:
        return "vllm"  # INFER_BACKEND, ROLLOUT_BACKEND: the engine the script is written for first
    if upper == "DEVICE":
        return "gpu"
    return str(home / name.lower())


def capture_script(script: Path, checkout: Path, timeout_s: float = 20.0, args: tuple[str, ...] = (),
                   env: dict[str, str] | None = None) -> Capture:
    """Run `script` from `checkout` (verl scripts expect the repository root as working directory). A variable the
    script needs but does not default (`set -u`: "X: unbound variable", or `${X:?...}`) gets a placeholder value
    and the script runs again, as its user would have exported it. `args` are the script's own arguments ("$@"),
    `env` variables exported before it runs."""
    extra: dict[str, str] = dict(env or {})
    for _ in range(PLACEHOLDER_ATTEMPTS):
        capture = _capture_once(script, checkout, timeout_s, extra, args)
        missing = re.search(r"line \d+: ([A-Za-z_]\w*): ", capture.stderr_tail)
        if capture.launches or missing is None or missing.group(1) in extra:
            return capture
        extra[missing.group(1)] = placeholder(missing.group(1), Path(tempfile.gettempdir()) / "verl_capture_home")
    return capture


def _capture_once(script: Path, checkout: Path, timeout_s: float, extra: dict[str, str], args: tuple[str, ...]) -> Capture:
    with tempfile.TemporaryDirectory(prefix="verl_capture_") as tmp:
        folder = Path(tmp)
        bin_dir = _standin_bin(folder)
        captured = folder / "captured"
        captured.mkdir()
        home = folder / "home"
        home.mkdir()
        env = {"PATH": str(bin_dir), "HOME": str(home), "USER": "verl", "CAPTURE_DIR": str(captured),
               "PWD": str(checkout), "TERM": "dumb", **extra}  # fmt: skip
        prelude = PRELUDE
        bash = shutil.which("bash") or "/bin/bash"
        try:
            run = subprocess.run([bash, "-c", prelude + 'builtin source "$0" "$@"', str(script), *args], cwd=checkout, env=env,
                                 stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s)
            returncode, stderr = run.returncode, run.stderr
        except subprocess.TimeoutExpired:
            returncode, stderr = 124, f"timed out after {timeout_s} s"
        launches = [path.read_bytes().decode().split("\0")[:-1]
                    for path in sorted(captured.iterdir(), key=lambda p: int(p.stem))]
    return Capture(str(script), launches, returncode, stderr[-400:], dict(extra))


def find_scripts(folder: Path) -> list[Path]:
    """Shell scripts under `folder` that launch verl.trainer.main_ppo (comment lines do not count)."""
    found = []
    for path in sorted(folder.rglob("*.sh")):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if any(LAUNCHER_NAME.search(line) and not line.lstrip().startswith("#") for line in text.splitlines()):
            found.append(path)
    return found


def environment_note() -> str:
    return f"bash {os.environ.get('BASH_VERSION', '')} with stand-ins for {', '.join(STANDINS)} and nvidia-smi (8 GPUs)"
