"""Models named as users name them: a hub id from a Hugging Face cache laid out by the test (huggingface_hub's own
try_to_load_from_cache must find it), offline; a checkpoint folder written by transformers' save_pretrained."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import huggingface_hub
import huggingface_hub.constants
import pytest

from wizard.errors import DswizError
from wizard.model import load_model_spec
from wizard.model_presets import PRESETS

COMMIT = "0123456789abcdef0123456789abcdef01234567"
REPO = "tiny-org/tiny-llama"
ROOT = Path(__file__).resolve().parents[2]


def make_hub_cache(hub_cache: Path, repo_id: str, files: dict[str, bytes]) -> Path:
    """huggingface_hub's cache layout (docs: "Understand caching"): models--{org}--{name}/blobs/<sha256>,
    snapshots/<commit>/<file> -> ../../blobs/<sha256>, refs/main holding the commit."""
    repo = hub_cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    snap = repo / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    for name, data in files.items():
        digest = hashlib.sha256(data).hexdigest()
        (repo / "blobs" / digest).write_bytes(data)
        (snap / name).symlink_to(Path("..") / ".." / "blobs" / digest)
    return snap


LLAMA = {**PRESETS["llama-7b"], "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
         "num_key_value_heads": 4, "intermediate_size": 688, "vocab_size": 1000, "torch_dtype": "bfloat16"}  # fmt: skip


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An offline hub whose cache is a tmp dir (huggingface_hub read HF_HUB_CACHE when imported: set it there)."""
    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    return cache


def test_the_layout_is_what_huggingface_hub_finds(hub_cache: Path) -> None:
    snap = make_hub_cache(hub_cache, REPO, {"config.json": json.dumps(LLAMA).encode()})
    found = huggingface_hub.try_to_load_from_cache(REPO, "config.json")
    assert found == str(snap / "config.json")


def cache_config_and_index(hub_cache: Path, index: dict[str, Any]) -> None:
    files = {"config.json": LLAMA, "model.safetensors.index.json": index}
    make_hub_cache(hub_cache, REPO, {name: json.dumps(d).encode() for name, d in files.items()})


def test_hub_id_from_the_cache_offline(hub_cache: Path) -> None:
    spec_numbers = load_model_spec("layers=2,hidden=256,heads=4,vocab=1000,ffn=688")
    index = {"metadata": {"total_size": 2 * spec_numbers.total_params}, "weight_map": {}}
    cache_config_and_index(hub_cache, index)
    spec = load_model_spec(REPO)
    assert spec.name == REPO and spec.source.startswith(f"hub:{REPO}@{COMMIT}")
    assert spec.total_params == spec_numbers.total_params and spec.notes == ()  # the index agrees


def test_an_index_with_another_count_wins_with_a_note(hub_cache: Path) -> None:
    index = {"metadata": {"total_parameters": 1_234_567, "total_size": 2_469_134}}
    cache_config_and_index(hub_cache, index)
    spec = load_model_spec(REPO)
    assert spec.total_params == 1_234_567
    assert "shard index count 1,234,567 parameters (BF16)" in spec.notes[-1]


def test_hub_id_not_cached_offline_names_the_fix(hub_cache: Path) -> None:
    with pytest.raises(DswizError) as e:
        load_model_spec("meta-llama/Llama-3.1-8B")
    assert "not in the local Hugging Face cache and HF_HUB_OFFLINE is set" in e.value.problem
    assert e.value.fix is not None and "hf download meta-llama/Llama-3.1-8B config.json" in e.value.fix


def test_checkpoint_folder_counts_from_safetensors_headers(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = LlamaConfig(**{k: v for k, v in LLAMA.items() if k != "model_type"})
    model = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16)
    model.save_pretrained(tmp_path / "ckpt")
    spec = load_model_spec(str(tmp_path / "ckpt"))
    assert spec.total_params == model.num_parameters()
    assert spec.source == str(tmp_path / "ckpt" / "config.json")


def test_a_folder_whose_headers_disagree_uses_them(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    np = pytest.importorskip("numpy")
    folder = tmp_path / "odd"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA))
    save_file({"w": np.zeros((10, 10), dtype=np.float16)}, str(folder / "model.safetensors"))
    spec = load_model_spec(str(folder))
    assert spec.total_params == 100 and "safetensors headers count 100 parameters (F16)" in spec.notes[-1]


def test_a_folder_without_config_and_a_broken_safetensors(tmp_path: Path) -> None:
    with pytest.raises(DswizError, match=r"directory without a config\.json"):
        load_model_spec(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    (tmp_path / "model.safetensors").write_bytes(b"\xff" * 16)
    with pytest.raises(DswizError) as e:
        load_model_spec(str(tmp_path))
    assert "not a readable safetensors file" in e.value.problem


def test_dswiz_plan_takes_a_hub_id_with_hf_home(tmp_path: Path) -> None:
    """The CLI end to end, huggingface_hub reading HF_HOME and HF_HUB_OFFLINE from the environment itself."""
    make_hub_cache(tmp_path / "hf" / "hub", REPO, {"config.json": json.dumps(LLAMA).encode()})
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    env.pop("HF_HUB_CACHE", None)
    args = [sys.executable, "-m", "wizard", "plan", "--model", REPO, "--hardware", "1xH100-80GB", "--json"]
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["model"]["name"] == REPO
    missing = subprocess.run(
        [*args[:5], "org/absent", *args[6:]], env=env, capture_output=True, text=True, timeout=120
    )
    assert missing.returncode != 0 and "HF_HUB_OFFLINE is set" in missing.stderr + missing.stdout
    assert "Traceback" not in missing.stderr


_LOAD = """import sys
from wizard.errors import DswizError
from wizard.model import load_model_spec
try:
    load_model_spec(sys.argv[1])
except DswizError as e:
    print(e.problem)
    print(e.fix)
    sys.exit(3)
"""


class _Hub(BaseHTTPRequestHandler):
    """A stand-in for huggingface.co (HF_ENDPOINT): answers the way the hub does, by error code header."""

    def _answer(self) -> None:
        code, error = (401, "GatedRepo") if "/gated/" in self.path else (404, "RepoNotFound")
        self.send_response(code)
        self.send_header("X-Error-Code", error)
        self.send_header(
            "X-Error-Message", "Access to this model is restricted" if code == 401 else "not found"
        )
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_GET = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize(
    ("repo", "problem", "fix"),
    [
        ("org-x/gated", "is gated and this account has no access", "set HF_TOKEN"),
        (
            "org-x/missing",
            "no model org-x/missing on the Hugging Face hub",
            "for a private repo set HF_TOKEN",
        ),
    ],
)
def test_online_errors_of_the_hub_name_the_fix(tmp_path: Path, repo: str, problem: str, fix: str) -> None:
    """huggingface_hub's own download and error mapping against a local endpoint (no network here)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "PYTHONPATH": str(ROOT),
               "HF_ENDPOINT": f"http://127.0.0.1:{server.server_address[1]}"}  # fmt: skip
        env.pop("HF_HUB_OFFLINE", None)
        out = subprocess.run(
            [sys.executable, "-c", _LOAD, repo], env=env, capture_output=True, text=True, timeout=120
        )
    finally:
        server.shutdown()
    assert out.returncode == 3, out.stderr[-2000:]
    assert problem in out.stdout and fix in out.stdout


def test_a_hub_that_does_not_resolve_is_said_at_once(tmp_path: Path) -> None:
    """Without DNS (a cluster without internet) huggingface_hub retried for about 25 s, printing every retry, before
    failing; the `.invalid` top-level domain never resolves (RFC 2606)."""
    env = {
        **os.environ,
        "HF_HOME": str(tmp_path / "hf"),
        "PYTHONPATH": str(ROOT),
        "HF_ENDPOINT": "https://hub.invalid",
    }
    for var in (
        "HF_HUB_OFFLINE",
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
    ):
        env.pop(var, None)
    out = subprocess.run(
        [sys.executable, "-c", _LOAD, "org-x/model"], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 3, out.stderr[-2000:]
    assert (
        "cannot reach the Hugging Face hub for org-x/model: hub.invalid does not resolve here" in out.stdout
    )
    assert "HF_HUB_OFFLINE=1 uses the cache" in out.stdout and "Retrying" not in out.stderr


def test_a_cached_config_plans_without_the_shard_index_where_the_hub_is_out_of_reach(tmp_path: Path) -> None:
    """`hf download ORG/NAME config.json` (the fix dswiz gives) caches the config alone: the optional shard index is
    not fetched from a hub that does not resolve (no retries), and a hub that refuses it does not stop the plan."""
    make_hub_cache(tmp_path / "hf" / "hub", REPO, {"config.json": json.dumps(LLAMA).encode()})
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "PYTHONPATH": str(ROOT)}
    for var in ("HF_HUB_OFFLINE", "HF_HUB_CACHE", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy",
                "ALL_PROXY", "all_proxy"):  # fmt: skip
        env.pop(var, None)
    args = [sys.executable, "-m", "wizard", "plan", "--model", REPO, "--hardware", "1xH100-80GB", "--json"]
    unresolved = subprocess.run(
        args, env={**env, "HF_ENDPOINT": "https://hub.invalid"}, capture_output=True, text=True, timeout=120
    )
    assert unresolved.returncode == 0, unresolved.stderr[-2000:]
    assert json.loads(unresolved.stdout)["model"]["name"] == REPO and "Retrying" not in unresolved.stderr
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)  # answers 404 RepoNotFound: a repo made private
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        refused = subprocess.run(
            args, env={**env, "HF_ENDPOINT": endpoint}, capture_output=True, text=True, timeout=120
        )
    finally:
        server.shutdown()
    assert refused.returncode == 0, refused.stderr[-2000:]
    assert json.loads(refused.stdout)["model"]["name"] == REPO
