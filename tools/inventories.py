"""Write ``docs/_inventories/trio.txt``: where trio documents each of its names.

The docs link trio names (``trio.abc.Stream``, ``trio.BrokenResourceError``, ...) to
trio's own site through intersphinx, which needs trio's object inventory.  This
machine builds the docs without reaching the web, so the inventory comes from trio's
documentation source, which trio's sdist ships: every ``.. autoclass::``,
``.. autofunction::`` (and the like) under its ``currentmodule`` is one object, on the
page of the file it is in; a class documented with ``:members:`` adds its public
members, found on the installed trio.  ``docs/conf.py`` turns the text into the
inventory file Sphinx reads.

    python tools/inventories.py TRIO_SDIST_DOCS_SOURCE [OUT]

(for example ``pip download --no-deps --no-binary :all: trio==0.35.0``, unpacked, then
``trio-0.35.0/docs/source``).
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import trio

#: Directive -> the Python domain role of what it documents.
ROLES = {
    "class": "class",
    "autoclass": "class",
    "exception": "exception",
    "autoexception": "exception",
    "function": "function",
    "autofunction": "function",
    "decorator": "function",
    "method": "method",
    "automethod": "method",
    "attribute": "attribute",
    "autoattribute": "attribute",
    "data": "data",
    "autodata": "data",
}
DIRECTIVE = re.compile(r"^(?P<indent>\s*)\.\. (?P<kind>[a-z]+)::\s*(?P<name>[\w.]+)")


def objects(source: Path) -> list[tuple[str, str, str]]:
    """(name, role, uri) of every object trio's docs in ``source`` document."""
    found: dict[str, tuple[str, str]] = {}
    for page in sorted(source.glob("*.rst")):
        uri = page.stem + ".html#$"
        module, owner = "trio", ""
        lines = page.read_text().splitlines()
        for number, line in enumerate(lines):
            match = DIRECTIVE.match(line)
            if match is None:
                continue
            kind, name, indent = match["kind"], match["name"], match["indent"]
            if kind in ("module", "currentmodule"):
                module, owner = name, ""
                if kind == "module":
                    found.setdefault(name, ("module", page.stem + ".html#module-$"))
                continue
            role = ROLES.get(kind)
            if role is None:
                continue
            if role in ("method", "attribute") and indent and owner and "." not in name:
                full = f"{owner}.{name}"
            elif name.startswith("trio"):
                full = name
            else:
                full = f"{module}.{name}"
            found.setdefault(full, (role, uri))
            if role in ("class", "exception"):
                owner = full
                if _has_members_option(lines, number):
                    for member, member_role in _members(full):
                        found.setdefault(f"{full}.{member}", (member_role, uri))
    return sorted((name, role, uri) for name, (role, uri) in found.items())


def _has_members_option(lines: list[str], number: int) -> bool:
    for line in lines[number + 1 :]:
        if not line.strip().startswith(":"):
            return False
        if line.strip().startswith(":members:"):
            return True
    return False


def _members(full: str) -> list[tuple[str, str]]:
    """Public members of the class ``full`` on the installed trio."""
    module_name, _, class_name = full.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError):
        return []
    members = []
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        members.append((name, "method" if callable(value) else "attribute"))
    return members


def main() -> None:
    source = Path(sys.argv[1])
    default = Path(__file__).parent.parent / "docs" / "_inventories" / "trio.txt"
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else default

    lines = [f"# trio {trio.__version__}: name role uri ($ is the name), from {source.name}"]
    lines += [f"{name} py:{role} {uri}" for name, role, uri in objects(source)]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"{len(lines) - 1} objects -> {out}")


if __name__ == "__main__":
    main()
