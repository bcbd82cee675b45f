"""Print the config reference table that docs/configuration.md holds (between the config-reference markers).

python tools/config_reference.py            # print
python tools/config_reference.py --write    # update docs/configuration.md in place
"""

from __future__ import annotations

import sys
from pathlib import Path

from omnidistill.config.reference import config_reference_markdown

BEGIN, END = "<!-- config-reference:begin -->", "<!-- config-reference:end -->"


def updated_page(text: str) -> str:
    start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + "\n" + config_reference_markdown() + "\n" + text[stop:]


if __name__ == "__main__":
    page = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
    if "--write" in sys.argv:
        page.write_text(updated_page(page.read_text(encoding="utf-8")), encoding="utf-8")
    else:
        print(config_reference_markdown())
