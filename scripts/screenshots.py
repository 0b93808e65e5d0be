"""Regenerate screenshots/ from the real wizard (real planner and config writers) against fixed hardware.

    python scripts/screenshots.py [--out screenshots/]

For each hardware fixture it walks the wizard with the keyboard, as a user would, and saves every step as SVG
(Textual's save_screenshot) and, when cairosvg is importable (it is in the test extra), as PNG too. Hardware comes
from tests/fixtures/hardware/*.json (saved `dswiz detect --json` reports and described profiles) or, for a fixture
missing there, from a described spec. Nothing is drawn by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wizard.hardware import get_hardware  # noqa: E402
from wizard.hardware.report import HardwareReport  # noqa: E402
from wizard.tui.factory import build_app  # noqa: E402

SIZE = (120, 40)
FIXTURES = ROOT / "tests" / "fixtures" / "hardware"
# (name, fixture file, described spec used when the file is absent, model)
MACHINES = (
    # the real `dswiz detect --json` of the H200 machine (1 GPU, 125 GiB RAM, no NVMe drive, no libaio)
    ("h200", "h200-detected.json", "1xH200", "mistral-7b"),
    ("8xa100", "described-8xA100-80GB.json", "8xA100-80GB", "llama-13b"),
    ("2x8xh100", None, "2x8xH100", "llama-70b"),
)
STEPS = ("1-hardware", "2-model", "3-strategy", "4-precision", "5-multinode", "6-review")


def load_hardware(fixture: str | None, spec: str) -> HardwareReport:
    """The fixture file when there is one, else the described spec."""
    if fixture and (FIXTURES / fixture).is_file():
        return get_hardware(str(FIXTURES / fixture))
    return get_hardware(spec)


async def shoot(name: str, hw: HardwareReport, model: str, out: Path) -> list[Path]:
    from textual.widgets import Input, TextArea

    app = build_app(hardware=hw, out_dir=Path("run1"))  # relative: the screens show what a user would see
    saved: list[Path] = []
    async with app.run_test(size=SIZE) as pilot:

        async def save(step: str) -> None:
            for w in app.screen.query(Input):
                w.cursor_blink = False
            for t in app.screen.query(TextArea):
                t.cursor_blink = False
            app.screen.query_one("#next").focus()
            app.screen.query_one("#body").scroll_home(animate=False)  # each step from its top, as it opens
            await pilot.pause()
            target = out / f"wizard-{name}-{step}.svg"
            app.save_screenshot(target.name, str(out))
            saved.append(target)

        await pilot.pause()
        await save(STEPS[0])
        await pilot.press("ctrl+n")
        await pilot.pause()
        field = app.screen.query_one("#model", Input)
        field.focus()
        await pilot.press(*model)
        await save(STEPS[1])
        for step in STEPS[2:]:
            await pilot.press("ctrl+n")
            await app.workers.wait_for_complete()
            await pilot.pause()
            status = str(app.screen.query_one("#status").render())
            if status.strip():
                print(f"  {name} {step}: {status}")
            await save(step)
        await pilot.click("#write")
        await pilot.pause()
        await save("7-written")
    return saved


def to_png(svgs: list[Path]) -> bool:
    try:
        import cairosvg  # type: ignore[import-not-found]
    except ImportError:
        return False
    for svg in svgs:
        cairosvg.svg2png(url=str(svg), write_to=str(svg.with_suffix(".png")))
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "screenshots")
    args = ap.parse_args()
    args.out = args.out.resolve()  # the walk changes directory: a relative --out must not follow it
    args.out.mkdir(parents=True, exist_ok=True)
    all_svgs: list[Path] = []
    with tempfile.TemporaryDirectory() as work:
        for name, fixture, spec, model in MACHINES:
            hw = load_hardware(fixture, spec)
            print(f"{name}: {hw.description or 'detected report'} -> {model}")
            here = Path(work) / name
            here.mkdir()
            os.chdir(here)  # the review step diffs against files in the output dir: start from an empty one
            all_svgs += asyncio.run(shoot(name, hw, model, args.out))
            os.chdir(ROOT)
    png = to_png(all_svgs)
    print(
        f"wrote {len(all_svgs)} SVG{' and PNG' if png else ' (no PNG: cairosvg is not installed)'} to {args.out}"
    )


if __name__ == "__main__":
    main()
