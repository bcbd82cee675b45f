"""The license ids the Hugging Face Hub accepts in a model card's ``license`` field.

The Hub validates a card's metadata when a commit is made and refuses any other value
(``Invalid metadata in README.md. - "license" must be one of [...]``, huggingface/huggingface_hub
issue 4218), so an export checks ``--license`` before it writes, not at upload. The list is the
"License identifier" column of the Hub's documentation, ``docs/hub/repositories-licenses.md`` of
huggingface/hub-docs at commit 242f4a1 (2026-08-22). A license that is not on it is given as
``other`` with a name (``license_name``) and, if wanted, a link to its text (``license_link``), as
that page asks.
"""

from __future__ import annotations

from omnidistill.config import nearest_name

HUB_LICENSES: frozenset[str] = frozenset(
    """
    apache-2.0 mit openrail bigscience-openrail-m creativeml-openrail-m bigscience-bloom-rail-1.0 bigcode-openrail-m
    afl-3.0 artistic-2.0 bsl-1.0 bsd bsd-2-clause bsd-3-clause bsd-3-clause-clear c-uda cc cc0-1.0 cc-by-2.0 cc-by-2.5
    cc-by-3.0 cc-by-4.0 cc-by-sa-3.0 cc-by-sa-4.0 cc-by-nc-2.0 cc-by-nc-3.0 cc-by-nc-4.0 cc-by-nd-4.0 cc-by-nc-nd-3.0
    cc-by-nc-nd-4.0 cc-by-nc-sa-2.0 cc-by-nc-sa-3.0 cc-by-nc-sa-4.0 cdla-sharing-1.0 cdla-permissive-1.0
    cdla-permissive-2.0 wtfpl ecl-2.0 epl-1.0 epl-2.0 etalab-2.0 eupl-1.1 eupl-1.2 agpl-3.0 gfdl gpl gpl-2.0 gpl-3.0 lgpl
    lgpl-2.1 lgpl-3.0 isc h-research intel-research lppl-1.3c ms-pl apple-ascl apple-amlr mpl-2.0 odc-by odbl
    openmdw-1.0 openmdw-1.1 openrail++ osl-3.0 postgresql ofl-1.1 ncsa unlicense zlib pddl lgpl-lr deepfloyd-if-license
    fair-noncommercial-research-license llama2 llama3 llama3.1 llama3.2 llama3.3 llama4 grok2-community gemma unknown other
    """.split()
)


def check_license(license_id: str, name: str | None = None, link: str | None = None) -> None:
    """Refuse, naming the flag, a ``--license`` the Hub would refuse at upload (with the nearest id it
    accepts), ``other`` without a ``--license-name``, and a name or link beside a listed license (the
    Hub reads them only with ``other``)."""
    if license_id not in HUB_LICENSES:
        near = nearest_name(license_id.lower(), HUB_LICENSES)
        hint = f"did you mean {near}? " if near else ""
        raise ValueError(
            f"--license {license_id}: not a Hub license id, and the Hub refuses a model card with it at upload ({hint}"
            "the ids: https://huggingface.co/docs/hub/repositories-licenses); for another license, give "
            "--license other --license-name NAME [--license-link URL]"
        )
    if license_id == "other" and not name:
        raise ValueError("--license other needs --license-name NAME (and --license-link URL to its text), as the Hub asks")
    if license_id != "other" and (name or link):
        raise ValueError(f"--license-name and --license-link go with --license other; {license_id} is a license the Hub knows")
