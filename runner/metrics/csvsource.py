"""Follow DeepSpeed's csv monitor directory: new files as they appear, new rows as they are appended."""

from __future__ import annotations

from pathlib import Path

from runner.metrics.csvmon import CSV_SUFFIX, CsvParseState, CsvPoint, metric_from_filename, parse_csv_lines
from runner.metrics.tail import FileTail


class CsvSource:
    """``poll()`` returns the rows appended since the last poll, across every ``*.csv`` under ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._files: dict[Path, tuple[FileTail, CsvParseState]] = {}

    def poll(self) -> list[CsvPoint]:
        try:
            found = sorted(self.directory.glob(f"*{CSV_SUFFIX}"))
        except OSError:
            found = []
        for path in found:
            if path not in self._files:
                self._files[path] = (FileTail(path), CsvParseState(metric=metric_from_filename(path.name)))
        points: list[CsvPoint] = []
        for path in sorted(self._files):
            tail, state = self._files[path]
            got, _ = parse_csv_lines(tail.poll(), state)
            points.extend(got)
        return points

    def close(self) -> None:
        for tail, _ in self._files.values():
            tail.close()
