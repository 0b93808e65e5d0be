"""A file that cannot be imported is a DswizError naming the problem and the fix -- never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from wizard.config.load import load_path
from wizard.errors import DswizError, read_user_text

BAD_FILES = {
    "not_json.json": ('{"train_micro_batch_size_per_gpu": 4,}', "not valid JSON", "trailing commas"),
    "duplicate.json": (
        '{\n  "zero_optimization": {"stage": 2},\n  "zero_optimization": {"stage": 3}\n}',
        'duplicate key "zero_optimization"',
        "keep one",
    ),
    "string_number.json": ('{"train_micro_batch_size_per_gpu": "8"}', "must be a number", "without quotes"),
    "bool_stage.json": ('{"zero_optimization": {"stage": true}}', "zero_optimization.stage", "dswiz check"),
    "bad_device.json": (
        '{"zero_optimization": {"stage": 3, "offload_param": {"device": "gpu"}}}',
        "zero_optimization.offload_param.device",
        "dswiz check",
    ),
    "list.json": ("[1, 2]", "JSON object, not an array", "train_micro_batch_size_per_gpu"),
    "negative.json": ('{"gradient_clipping": -1}', "must not be negative", "dswiz check"),
    "not_yaml.yaml": ("a: [1, 2\nb: 3", "not valid YAML", "indentation"),
    "scalar.yaml": ("just text", "YAML mapping", "accelerate config"),
    "multi_gpu.yaml": (
        "distributed_type: MULTI_GPU\nnum_processes: 2\n",
        "not a DeepSpeed accelerate config",
        "DEEPSPEED",
    ),
    "dup.yaml": (
        "distributed_type: DEEPSPEED\nnum_processes: 2\nnum_processes: 4\n",
        'duplicate key "num_processes"',
        "keep one",
    ),
    "missing_json.yaml": (
        "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: /nonexistent/ds.json\n",
        "/nonexistent/ds.json does not exist",
        "check the path",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_file_is_a_clear_error(tmp_path: Path, name: str) -> None:
    text, problem_part, fix_part = BAD_FILES[name]
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(DswizError) as info:
        load_path(path)
    assert problem_part in info.value.problem
    assert info.value.fix and fix_part in info.value.fix


@pytest.mark.parametrize(
    ("name", "line"), [("duplicate.json", 3), ("not_json.json", 1), ("not_yaml.yaml", 2), ("dup.yaml", 3)]
)
def test_syntax_problems_name_their_line(tmp_path: Path, name: str, line: int) -> None:
    path = tmp_path / name
    path.write_text(BAD_FILES[name][0])
    with pytest.raises(DswizError) as info:
        load_path(path)
    assert f"line {line}" in info.value.problem


def test_missing_and_directory_paths(tmp_path: Path) -> None:
    with pytest.raises(DswizError, match="does not exist"):
        load_path(tmp_path / "nope.json")
    with pytest.raises(DswizError, match="is a directory"):
        load_path(tmp_path)


def test_binary_file(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(b"\xff\xfe\x00\x01")
    with pytest.raises(DswizError, match="UTF-8"):
        load_path(path)


def test_reads_are_bounded_and_keep_text_modes_newlines(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_text("{" + " " * 100 + "}")
    with pytest.raises(DswizError, match="larger than") as info:
        read_user_text(big, "a DeepSpeed JSON", "pass the config", limit=64)
    assert info.value.fix == "pass the config"
    assert read_user_text(big, "a DeepSpeed JSON", "pass the config", limit=102).startswith("{ ")
    crlf = tmp_path / "crlf.json"
    crlf.write_bytes(b'{"a": 1,\r\n "b": 2}\r')
    assert read_user_text(crlf, "x", "y") == '{"a": 1,\n "b": 2}\n'


def test_yaml_config_file_path_is_resolved_next_to_the_yaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 2}))
    (tmp_path / "acc.yaml").write_text(
        yaml.safe_dump(
            {"distributed_type": "DEEPSPEED", "deepspeed_config": {"deepspeed_config_file": "ds.json"}}
        )
    )
    monkeypatch.chdir("/")
    loaded = load_path(tmp_path / "acc.yaml")
    assert loaded.ds_config_path == tmp_path / "ds.json"
    assert loaded.config.deepspeed.train_micro_batch_size_per_gpu == 2
