"""The README's map of folders is the tree: every name in it exists, and every module of service/ is in it."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAP_START = "The folders, and what each module is for"


def mapped_paths() -> set[str]:
    """The paths the map names: each line holds names, then (after two spaces or more) what they are for; a
    name's folder is the folder above it in the map, by indentation."""
    readme = (ROOT / "README.md").read_text()
    block = readme[readme.index(MAP_START) :].split("```")[1].strip("\n")
    folders: list[str] = []  # the folder at each depth
    paths = set()
    for line in block.splitlines():
        depth = (len(line) - len(line.lstrip(" "))) // 2
        names = re.split(r"\s{2,}", line.strip())[0].split()
        del folders[depth:]
        for name in names:
            paths.add("/".join([*folders, name.rstrip("/")]))
        if names[-1].endswith("/"):
            folders.append(names[-1].rstrip("/"))
    return paths


def test_every_name_in_the_map_is_in_the_tree() -> None:
    missing = sorted(p for p in mapped_paths() if not (ROOT / p).exists())
    assert missing == [], f"the README's map names what is not there: {missing}"


def test_every_module_and_folder_of_the_service_and_every_top_folder_is_in_the_map() -> None:
    mapped = mapped_paths()
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    top_folders = {line.split("/")[0] for line in tracked.splitlines() if "/" in line and not line.startswith(".")}
    assert top_folders - mapped == set(), "a top folder missing from the README's map"

    def covered(path: Path) -> bool:
        # A folder the map names without listing what is in it stands for all of it.
        relative = path.relative_to(ROOT)
        wholes = (
            str(a) for a in relative.parents if str(a) in mapped and not any(m.startswith(f"{a}/") for m in mapped)
        )
        return str(relative) in mapped or any(wholes)

    service = ROOT / "service"
    modules = [p for p in service.rglob("*.py") if p.name != "__init__.py"]
    folders = [p for p in service.rglob("*") if p.is_dir() and p.name != "__pycache__"]
    unmapped = sorted(str(p.relative_to(ROOT)) for p in [*modules, *folders] if not covered(p))
    assert unmapped == [], f"modules or folders of service/ missing from the README's map: {unmapped}"
