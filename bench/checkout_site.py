"""Map the checkout into a site folder as `armlm`, the way the editable install maps it, by symbolic links.

For a lent GPU: its image has no build tools to install armlm, and a wheel built beforehand and carried would run the
code of the commit it was built at, not the checkout that travelled with it. Links run the checkout itself. The
mapping is pyproject.toml's [tool.setuptools.package-dir], read here, so it cannot drift from the install's.

    python bench/checkout_site.py /tmp/site && export PYTHONPATH=/tmp/site:$PYTHONPATH
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]


def package_dirs(repo: Path = REPO) -> dict[str, str]:
    """Installed package name -> the checkout folder it is built from."""
    return tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]


def link_checkout(site: Path, repo: Path = REPO) -> Path:
    """Build `site/armlm` as links into `repo`; returns it. A package that is the parent of others (`armlm` itself) is a
    real folder whose files are links, so its children can sit beside them; every other package is one link."""
    mapping = package_dirs(repo)
    missing = [folder for folder in mapping.values() if not (repo / folder / "__init__.py").is_file()]
    if missing:
        raise SystemExit(f"checkout_site: {', '.join(missing)} in pyproject's package-dir is not a package in {repo}; "
                         "run from the checkout the lease carries")
    for top in {name.split(".")[0] for name in mapping}:  # replaced whole: an installed copy, or earlier links
        stale = site / top
        if stale.is_symlink() or stale.is_file():
            stale.unlink()
        elif stale.is_dir():
            shutil.rmtree(stale)  # removes links, never what they point to
    parents = {name.rsplit(".", 1)[0] for name in mapping if "." in name}
    for name in sorted(mapping, key=lambda n: n.count(".")):  # parents before their children
        target, source = site.joinpath(*name.split(".")), repo / mapping[name]
        if name in parents:
            target.mkdir(parents=True)
            for entry in source.iterdir():
                if entry.name != "__pycache__" and f"{name}.{entry.name}" not in mapping:
                    (target / entry.name).symlink_to(entry.resolve())
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(source.resolve(), target_is_directory=True)
    return site / "armlm"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the folder to put on PYTHONPATH")
    args = parser.parse_args(argv)
    print(f"armlm -> {link_checkout(args.site)} (links into {REPO})", file=sys.stderr)


if __name__ == "__main__":
    main()
