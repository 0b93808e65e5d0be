"""Reading config text strictly: JSON with duplicate keys refused, YAML with duplicate keys refused, each problem
named with its line. Used by the importer (which raises DswizError) and the linter (which reports findings)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import yaml


@dataclass(frozen=True)
class ParseProblem:
    """Why a text is not a usable config, with a 1-based line when known."""

    what: str
    fix: str
    line: int | None = None
    column: int | None = None


_LONG_NUMBER_FIX = "write the number with at most a few digits (DeepSpeed's settings are counts and sizes)"


class DuplicateKey(Exception):
    def __init__(self, key: str, line: int | None) -> None:
        super().__init__(key)
        self.key = key
        self.line = line


def _line_of_second(text: str, key: str) -> int | None:
    # json's hook gives no position; the duplicate is the second time "key": appears.
    matches = list(re.finditer(r'"' + re.escape(json.dumps(key)[1:-1]) + r'"\s*:', text))
    if len(matches) >= 2:
        return text.count("\n", 0, matches[1].start()) + 1
    return None


def _at(line: int | None) -> str:
    return f" on line {line}" if line else ""


def _duplicate(e: DuplicateKey, consequence: str, scope: str) -> ParseProblem:
    return ParseProblem(
        f'duplicate key "{e.key}"{_at(e.line)} {consequence}',
        f'keep one "{e.key}" entry{scope} and delete the other',
        e.line,
    )


def parse_json(text: str) -> tuple[Any, ParseProblem | None]:
    """(value, None) or (None, problem). Duplicate keys are a problem, as DeepSpeed refuses them too."""

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise DuplicateKey(key, _line_of_second(text, key))
            out[key] = value
        return out

    try:
        return json.loads(text, object_pairs_hook=pairs_hook), None
    except DuplicateKey as e:
        return None, _duplicate(
            e, '(DeepSpeed refuses: "Duplicate keys in DeepSpeed config")', " in that object"
        )
    except json.JSONDecodeError as e:
        return None, ParseProblem(
            f"not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})",
            "fix the JSON syntax there (no comments, no trailing commas, double-quoted keys)",
            e.lineno,
            e.colno,
        )
    except RecursionError:
        return None, ParseProblem("JSON nested too deeply to read", "a DeepSpeed config is a few levels deep")
    except (
        ValueError
    ) as e:  # Python's int() limit: "Exceeds the limit (4300 digits) for integer string conversion"
        return None, ParseProblem(f"a number in the JSON is too long to read ({e})"[:200], _LONG_NUMBER_FIX)


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys (yaml.safe_load silently keeps the last one)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a plain value", key_node.start_mark
            ) from None
        if key in seen:
            raise DuplicateKey(str(key), key_node.start_mark.line + 1)
        seen.add(key)
    loader.flatten_mapping(node)
    return dict(loader.construct_pairs(node, deep=deep))


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


MAX_YAML_NESTING = 100  # brackets deep; an accelerate config is two levels deep


def flow_nesting(text: str) -> int:
    """How deep ``[``/``{`` nest in the text (quotes not excluded: a bound, not a parse). PyYAML takes seconds on
    thousands of levels before failing, so deep text is refused before it is parsed."""
    depth = deepest = 0
    for c in text:
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}" and depth:
            depth -= 1
    return deepest


def parse_yaml(text: str) -> tuple[Any, ParseProblem | None]:
    if ("[" in text or "{" in text) and flow_nesting(text) > MAX_YAML_NESTING:
        return None, ParseProblem(
            f"YAML nested more than {MAX_YAML_NESTING} levels deep", "an accelerate config is two levels deep"
        )
    try:
        return yaml.load(text, Loader=_StrictLoader), None
    except DuplicateKey as e:
        return None, _duplicate(e, "(YAML keeps only the last one, silently)", "")
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        return None, ParseProblem(
            f"not valid YAML: {problem}" + (f" (line {line})" if line else ""),
            "fix the YAML syntax there (indentation, a ':' after each key, quotes around odd strings)",
            line,
        )
    except RecursionError:
        return None, ParseProblem("YAML nested too deeply to read", "an accelerate config is two levels deep")
    except ValueError as e:  # PyYAML's int constructor hits Python's 4,300-digit limit
        return None, ParseProblem(f"a number in the YAML is too long to read ({e})"[:200], _LONG_NUMBER_FIX)


def yaml_key_lines(text: str) -> dict[str, int]:
    """Key path ("deepspeed_config.zero_stage") -> 1-based line, for locations in findings. Empty on bad YAML."""
    if ("[" in text or "{" in text) and flow_nesting(text) > MAX_YAML_NESTING:
        return {}
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except (yaml.YAMLError, RecursionError):
        return {}
    lines: dict[str, int] = {}

    def visit(node: yaml.Node, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode):
                    path = f"{prefix}.{key_node.value}" if prefix else str(key_node.value)
                    lines.setdefault(path, key_node.start_mark.line + 1)
                    visit(value_node, path)

    if root is not None:
        visit(root, "")
    return lines
