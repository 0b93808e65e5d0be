"""Where a model's config comes from: a local config.json, a downloaded checkpoint folder, or a Hugging Face hub id
(``meta-llama/Llama-3.1-8B``) -- returned as the parsed config dict plus what the checkpoint itself says (exact
parameter count and dtype, from safetensors headers or the shard index).

Hub ids go through huggingface_hub's own API: the local cache first (``try_to_load_from_cache``), then, unless
HF_HUB_OFFLINE is set, ``hf_hub_download`` of config.json and the shard index only -- never weights. HF_TOKEN (or a
saved ``hf auth login``) is what huggingface_hub sends for gated repos. huggingface_hub is imported only here and
only for a hub id (it is slow to import, and presets, numbers and files do not need it).
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wizard.errors import DswizError, read_user_text

CONFIG_NAME = "config.json"
INDEX_NAME = "model.safetensors.index.json"  # transformers' SAFE_WEIGHTS_INDEX_NAME
# safetensors dtype codes -> bytes per element (safetensors format spec, "Dtype").
SAFETENSORS_DTYPE_BYTES = {
    "F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
    "F8_E4M3": 1, "F8_E5M2": 1, "I8": 1, "U8": 1, "BOOL": 1,
}  # fmt: skip
# config.json's torch_dtype / dtype -> the safetensors code
_CONFIG_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32", "float": "F32", "half": "F16"}
_MAX_HEADER_BYTES = 100_000_000  # the safetensors format's own limit on the JSON header
# Hub ids: "org/name" (huggingface_hub's validate_repo_id: letters, digits, '-', '_', '.', at most 96 chars).
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.\-]{0,95}/[\w.\-]{1,96}")


@dataclass(frozen=True)
class CheckpointFacts:
    """What the stored weights say, when they (or their index) are at hand."""

    total_params: int | None  # elements over all stored tensors; None when only bytes are known
    dtype: str | None  # "BF16", "F16", "F32", ... or "mixed"
    how: str  # "safetensors headers", "shard index"


@dataclass(frozen=True)
class ResolvedModel:
    """A model's config.json contents and where it came from."""

    config: dict[str, Any]
    name: str
    source: str  # the config.json path (for a hub id: "hub:<id>@<commit> (<path>)")
    facts: CheckpointFacts | None = None


def looks_like_hub_id(text: str) -> bool:
    """``org/name`` that is not a local path (no leading ./, /, ~, no .json, no deeper folders)."""
    return (
        bool(_HUB_ID.fullmatch(text)) and not text.startswith((".", "/", "~")) and not text.endswith(".json")
    )


MAX_CONFIG_BYTES = 16 * 1024 * 1024  # an HF config.json is a few KiB; a bigger file is not one


def read_config_json(path: Path) -> dict[str, Any]:
    """A config.json as a dict; DswizError naming the problem otherwise (bounded: docs/input-bounds.md)."""
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise DswizError(
                f"{path} is {size:,} bytes: not a model's config.json (those are a few KiB)",
                "pass the model's config.json, not its weights",
            )
        data = json.loads(read_user_text(path, "a model's config.json", "pass the model's HF config.json"))
    except OSError as e:  # the size check's stat
        raise DswizError(
            f"cannot read {path}: {e.strerror or e}", "check the path and its permissions"
        ) from e
    except json.JSONDecodeError as e:
        raise DswizError(
            f"{path} is not valid JSON (line {e.lineno}: {e.msg})", "pass the model's HF config.json"
        ) from e
    except (
        ValueError,
        RecursionError,
    ) as e:  # a number of 4,300+ digits; nesting deeper than Python recurses
        why = "nested too deeply" if isinstance(e, RecursionError) else "a number with too many digits"
        raise DswizError(
            f"{path} cannot be read as a config.json ({why})", "pass the model's HF config.json"
        ) from None
    if not isinstance(data, dict):
        raise DswizError(f"{path} does not hold a JSON object", "pass the model's HF config.json")
    return data


def resolve_folder(folder: Path) -> ResolvedModel:
    """A downloaded checkpoint folder: its config.json, and its safetensors headers (or shard index) for the exact
    parameter count and dtype."""
    config_path = folder / CONFIG_NAME
    if not config_path.is_file():
        raise DswizError(
            f"{folder} is a directory without a config.json",
            "point --model at the model's folder (the one holding config.json), its config.json, or a hub id",
        )
    config = read_config_json(config_path)
    name = str(config.get("_name_or_path") or folder.resolve().name)
    return ResolvedModel(config, name, str(config_path), checkpoint_facts(folder, config))


def checkpoint_facts(folder: Path, config: Mapping[str, Any]) -> CheckpointFacts | None:
    """Exact counts from the *.safetensors headers in ``folder``; else the shard index's metadata; else None.
    A quantized checkpoint (config.quantization_config) stores packed integers: its counts say nothing here."""
    if config.get("quantization_config"):
        return None
    files = sorted(folder.glob("*.safetensors"))
    if files:
        per_dtype: dict[str, int] = {}
        for f in files:
            for dtype, n in safetensors_header_counts(f).items():
                per_dtype[dtype] = per_dtype.get(dtype, 0) + n
        dtype = next(iter(per_dtype)) if len(per_dtype) == 1 else "mixed"
        return CheckpointFacts(sum(per_dtype.values()), dtype, "safetensors headers")
    index = folder / INDEX_NAME
    return index_facts(index, config) if index.is_file() else None


def safetensors_header_counts(path: Path) -> dict[str, int]:
    """Elements per dtype in one .safetensors file, from its header alone (8-byte little-endian length, then JSON:
    the safetensors format). Reads no tensor data."""
    try:
        with path.open("rb") as fh:
            raw_len = fh.read(8)
            (length,) = struct.unpack("<Q", raw_len) if len(raw_len) == 8 else (0,)
            if not 0 < length <= _MAX_HEADER_BYTES:
                raise ValueError("bad header length")
            header = json.loads(fh.read(length))
    except (OSError, ValueError, struct.error) as e:
        raise DswizError(
            f"{path} is not a readable safetensors file ({e})",
            "re-download it, or pass the config.json alone",
        ) from e
    counts: dict[str, int] = {}
    for key, t in header.items() if isinstance(header, dict) else ():
        if key == "__metadata__" or not isinstance(t, dict):
            continue
        n = 1
        for d in t.get("shape") or []:
            n *= int(d)
        dtype = str(t.get("dtype"))
        counts[dtype] = counts.get(dtype, 0) + n
    return counts


def index_facts(index: Path, config: Mapping[str, Any]) -> CheckpointFacts | None:
    """The shard index's metadata: ``total_parameters`` (transformers >= 5 writes it) or ``total_size`` bytes
    divided by the config's dtype size."""
    try:
        meta = json.loads(index.read_text(encoding="utf-8")).get("metadata") or {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return None
    dtype = _CONFIG_DTYPES.get(str(config.get("torch_dtype") or config.get("dtype") or ""))
    params = meta.get("total_parameters")
    if isinstance(params, int) and params > 0:
        return CheckpointFacts(params, dtype, "shard index")
    size = meta.get("total_size")
    if isinstance(size, int) and size > 0 and dtype:
        return CheckpointFacts(size // SAFETENSORS_DTYPE_BYTES[dtype], dtype, "shard index")
    return None


# ------------------------------------------------------------------------------------------------ the hub


def hub_offline() -> bool:
    """HF_HUB_OFFLINE as huggingface_hub reads it (any of 1/ON/YES/TRUE), at call time."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def resolve_hub_id(repo_id: str, *, cache_dir: str | Path | None = None) -> ResolvedModel:
    """The config.json of a hub model: from the local HF cache, else downloaded (config.json and the shard index
    only) unless offline. DswizError with the fix for a missing, gated or unreachable repo."""
    path = _cached(repo_id, CONFIG_NAME, cache_dir)
    if path is None:
        if hub_offline():
            raise DswizError(
                f"{repo_id} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set",
                f"fetch its config once online (`hf download {repo_id} config.json`, or unset HF_HUB_OFFLINE), "
                "or pass a local config.json / checkpoint folder",
            )
        host = _unresolved_hub_host()
        if host is not None:
            raise DswizError(
                f"cannot reach the Hugging Face hub for {repo_id}: {host} does not resolve here (no network?)",
                _offline_fix(),
            )
        path = _download(repo_id, CONFIG_NAME, cache_dir)
        if path is None:
            raise DswizError(f"{repo_id} has no config.json on the hub", "pass the model's config.json path")
    snapshot = path.parent
    config = read_config_json(path)
    facts = checkpoint_facts(snapshot, config)
    if facts is None:
        index = _shard_index(repo_id, cache_dir)
        facts = index_facts(index, config) if index is not None else None
    return ResolvedModel(config, repo_id, f"hub:{repo_id}@{snapshot.name} ({path})", facts)


def _shard_index(repo_id: str, cache_dir: str | Path | None) -> Path | None:
    """The shard index, which only refines the config's parameter count: from the cache, else downloaded where the
    hub is reachable. Never an error: a config found in the cache plans without it, on a machine without network
    too (``hf download ORG/NAME config.json`` fetches only the config)."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, INDEX_NAME, cache_dir=cache_dir)
    if isinstance(found, str):
        return Path(found)
    if found is not None or hub_offline() or _unresolved_hub_host() is not None:
        return None  # found: the cache knows the repo has none (huggingface_hub's _CACHED_NO_EXIST)
    try:
        return _download(repo_id, INDEX_NAME, cache_dir)
    except DswizError:
        return None


_PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def _unresolved_hub_host() -> str | None:
    """The hub's host name (HF_ENDPOINT's) when it does not resolve here and no proxy would reach it for us -- a
    machine without internet: huggingface_hub would retry for about 25 s, printing each retry, to fail the same way."""
    if any(os.environ.get(v) for v in _PROXY_VARS):
        return None
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    host = urlparse(constants.ENDPOINT).hostname
    if not host:
        return None
    try:
        socket.getaddrinfo(host, None)
    except socket.gaierror:
        return host
    except OSError:
        return None  # something else: let huggingface_hub try and say
    return None


def _cached(repo_id: str, filename: str, cache_dir: str | Path | None) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, filename, cache_dir=cache_dir)
    return Path(found) if isinstance(found, str) else None


def _download(repo_id: str, filename: str, cache_dir: str | Path | None) -> Path | None:
    """One small file from the hub into the cache; None when the repo has no such file."""
    from huggingface_hub import errors as hub_errors
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(repo_id, filename, cache_dir=cache_dir))
    except hub_errors.GatedRepoError as e:
        raise DswizError(
            f"{repo_id} is gated and this account has no access to it ({_first_line(e)})",
            f"accept its license on https://huggingface.co/{repo_id}, then set HF_TOKEN to a token of that account "
            "(or `hf auth login`)",
        ) from e
    except hub_errors.RepositoryNotFoundError as e:
        raise DswizError(
            f"no model {repo_id} on the Hugging Face hub (or it is private)",
            "check the id's spelling; for a private repo set HF_TOKEN; or pass a local config.json / folder",
        ) from e
    except hub_errors.RemoteEntryNotFoundError:  # the repo exists without this file (LocalEntry...: offline)
        return None
    except hub_errors.HfHubHTTPError as e:
        if getattr(e.response, "status_code", None) in (401, 403):
            raise DswizError(
                f"the hub refused access to {repo_id} ({_first_line(e)})",
                "set HF_TOKEN to a token that can read it (or `hf auth login`)",
            ) from e
        raise DswizError(
            f"the hub failed to serve {repo_id}/{filename}: {_first_line(e)}", _offline_fix()
        ) from e
    except (hub_errors.LocalEntryNotFoundError, OSError) as e:
        raise DswizError(
            f"cannot reach the Hugging Face hub for {repo_id}: {_first_line(e)}", _offline_fix()
        ) from e


def _offline_fix() -> str:
    return (
        "retry when online, or pass a local config.json / checkpoint folder (HF_HUB_OFFLINE=1 uses the cache)"
    )


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]
