"""The packages form layers and each imports only the ones below it (README, "Layout"; docs/architecture.md): read statically from
every module's imports, function-level ones included, so an upward import fails here, not only a cycle."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Bottom first; packages on one line share a layer and may not import each other.
LAYERS = [("common",), ("models",), ("objectives",), ("datamodules",), ("training",),
          ("sources",),  # a model to read: an armlm checkpoint (training.pretrained) or a Hugging Face one
          ("embeddings",),  # static vectors and word splitting, which NER on static vectors (finetune) reads
          ("finetune", "diagnostics", "generation"),
          ("zeroshot",),  # sentence scores build on the diagnostics' scorers and likelihood bound
          ("interchange",),  # export reads fine-tuned checkpoints through finetune's module
          ("analysis",),  # tables, reports and verdicts over run and study folders
          ("studies",),  # a study's stages, then its reports and verdicts
          ("bench",)]
LEVEL = {package: level for level, names in enumerate(LAYERS) for package in names}


def imported_packages(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found & LEVEL.keys()


def test_every_package_imports_only_layers_below_it():
    upward = []
    for package, level in LEVEL.items():
        for path in sorted((REPO / package).rglob("*.py")):
            for other in imported_packages(path) - {package}:
                if LEVEL[other] >= level:
                    upward.append(f"{path.relative_to(REPO)} imports {other}")
    assert not upward, upward
    packages = {p.name for p in REPO.iterdir() if (p / "__init__.py").is_file()} - {"tests"}
    assert packages <= LEVEL.keys()  # every package has its layer
