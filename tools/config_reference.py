"""Print the config reference table that README.md embeds (between the config-reference markers).

python tools/config_reference.py            # print
python tools/config_reference.py --write    # update README.md in place
"""

from __future__ import annotations

import sys
from pathlib import Path

from omnidistill.config_reference import config_reference_markdown

BEGIN, END = "<!-- config-reference:begin -->", "<!-- config-reference:end -->"


def updated_readme(text: str) -> str:
    start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + "\n" + config_reference_markdown() + "\n" + text[stop:]


if __name__ == "__main__":
    readme = Path(__file__).resolve().parents[1] / "README.md"
    if "--write" in sys.argv:
        readme.write_text(updated_readme(readme.read_text(encoding="utf-8")), encoding="utf-8")
    else:
        print(config_reference_markdown())
