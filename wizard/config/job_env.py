"""The environment lines a written script gives its job (launch.sh, job.sbatch): an ``export`` or ``unset`` per
variable, and PyTorch's expandable segments turned on the way `dswiz launch` does -- the other allocator settings of
the shell the script runs in kept, an earlier expandable_segments setting replaced, in PYTORCH_CUDA_ALLOC_CONF always
and PYTORCH_ALLOC_CONF where that shell sets it (wizard.alloc_conf.with_expandable_segments)."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping

from wizard.alloc_conf import ALLOC_CONF_VARS, EXPANDABLE, expandable_segments

# No arrays (an empty one is an unbound variable under set -u before bash 4.4), every item split on commas itself.
_EXPANDABLE_SEGMENTS_SH = (
    "# The plan counted on PyTorch's expandable segments: on for the job, this shell's other allocator settings kept",
    "with_expandable_segments() {",
    '  local rest="$1," out="" item key',
    '  while [ -n "$rest" ]; do',
    '    item="${rest%%,*}"; rest="${rest#*,}"',
    '    item="${item#"${item%%[![:space:]]*}"}"; item="${item%"${item##*[![:space:]]}"}"',
    '    key="${item%%:*}"; key="${key%"${key##*[![:space:]]}"}"',
    f'    case "$key" in "" | {EXPANDABLE}) ;; *) out="${{out:+$out,}}$item" ;; esac',
    "  done",
    f'  printf "%s" "${{out:+$out,}}{EXPANDABLE}:True"',
    "}",
    'export PYTORCH_CUDA_ALLOC_CONF="$(with_expandable_segments "${PYTORCH_CUDA_ALLOC_CONF:-}")"',
    'if [ -n "${PYTORCH_ALLOC_CONF+set}" ]; then',
    '  export PYTORCH_ALLOC_CONF="$(with_expandable_segments "$PYTORCH_ALLOC_CONF")"',
    "fi",
)


def env_lines(env: Mapping[str, str | None], quote: Callable[[str], str] = shlex.quote) -> list[str]:
    """Bash lines that give a job ``env`` (None: unset), each value written by ``quote``; allocator variables that
    turn expandable segments on become the lines that merge them into the shell's own settings."""
    allocator = {k: v for k, v in env.items() if k in ALLOC_CONF_VARS and v is not None}
    merge = bool(allocator) and expandable_segments(allocator)
    lines = [
        f"unset {key}" if value is None else f"export {key}={quote(value)}"
        for key, value in sorted(env.items())
        if not (merge and key in allocator)
    ]
    return lines + list(_EXPANDABLE_SEGMENTS_SH if merge else ())
