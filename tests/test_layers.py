"""The packages form layers and each imports only the ones below it (README, "Layout"; docs/architecture.md): read statically from
every module's imports, function-level ones included, so an upward import fails here, not only a cycle. Every package is
`armlm.<name>`, its folder at the repository's root mapped in by pyproject.toml's package-dir (cli/ is `armlm` itself):
an import by a bare name fails here too.

Code named by a string is an import too, made later: a registry's "module:function" (armlm.commands), a config's
`_target_` (Hydra's dotted paths) and a study config's `planner:` and `report:` ("module:function"). Those strings are read here as
edges of the same graph: a string in a module belongs to that module's package, a string in a config to the package
that composes and instantiates that config (CONFIG_READERS)."""

import ast
import os
import re
from pathlib import Path

import tomllib
import yaml

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
          ("bench",),
          ("cli",)]  # `armlm` itself, its command line: its registry names every command, a study's and a bench's too
LEVEL = {package: level for level, names in enumerate(LAYERS) for package in names}
PACKAGE_DIR = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
FOLDER = {name: folder for name, folder in PACKAGE_DIR.items() if folder in LEVEL}  # "armlm.models": "models"


def owner(dotted: str) -> str | None:
    """The layer (its folder) a module path names: armlm.models.x -> models, armlm.commands -> cli; None for
    another library's. bench/'s scripts share modules as bench.<name> (a checkout's folder of scripts, not installed)."""
    parts = dotted.split(".")
    if parts[0] == "bench":
        return "bench"
    if parts[0] != "armlm":
        return None
    return FOLDER.get(".".join(parts[:2]), FOLDER["armlm"])

# Which package composes or instantiates each config in configs/ (a primary config by its file's stem, a group by its
# folder); a config read by several packages belongs to the lowest, the first that instantiates what it names.
CONFIG_READERS = {
    # primary configs: the package of the command that runs on them (checked against the registry below)
    "train": "training", "finetune": "finetune", "evaluate": "diagnostics", "zeroshot": "zeroshot",
    "embeddings": "embeddings", "generate": "generation", "export": "interchange", "study": "studies",
    "pretraining_data": "training",  # the data settings train.yaml and embeddings.yaml share
    # groups
    "data": "training",  # training.setup builds the datamodule (diagnostics, zeroshot, embeddings read it later)
    "model": "training",  # training.setup.build_model_config
    "objective": "training",  # training.lit_module instantiates the objective
    "trainer": "training", "logger": "training",  # training.trainer
    "experiment": "training",  # a group of train.yaml
    "task": "finetune",  # a group of finetune.yaml; finetune.metrics instantiates its metrics
    "method": "embeddings",  # embeddings.run instantiates it
    "scale": "studies",  # a group of study.yaml, as configs/study/ is (studies.run calls a study's planner and report)
}
STUDY_KEYS = ("planner", "report")  # a study config's functions (studies.run.study_function)
IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
COLON_REFERENCE = re.compile(rf"^{IDENTIFIER}(\.{IDENTIFIER})*:{IDENTIFIER}$")  # "armlm.training.run:pretrain"
DOTTED_REFERENCE = re.compile(rf"^{IDENTIFIER}(\.{IDENTIFIER})+$")  # "armlm.objectives.mlm.MaskedLM", "armlm.analysis.reports.study_report"


def imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def imported_packages(path: Path) -> set[str]:
    return {o for o in map(owner, imported_modules(path)) if o is not None}


def python_files() -> list[Path]:
    """Every module of the repository: the packages, bench/, tests/, train.py and the records' scripts."""
    found = []
    for folder, subfolders, names in os.walk(REPO):
        subfolders[:] = [s for s in subfolders if not s.startswith((".", "__")) and s not in ("build", "outputs")]
        found += [Path(folder) / n for n in names if n.endswith(".py")]
    return sorted(found)


def test_every_package_imports_only_layers_below_it():
    upward = []
    for package, level in LEVEL.items():
        for path in sorted((REPO / package).rglob("*.py")):
            for other in imported_packages(path) - {package}:
                if LEVEL[other] >= level:
                    upward.append(f"{path.relative_to(REPO)} imports {other}")
    assert not upward, upward
    packages = {p.name for p in REPO.iterdir() if (p / "__init__.py").is_file()} - {"tests", "configs"}
    assert packages <= LEVEL.keys()  # every package has its layer
    assert set(FOLDER.values()) == LEVEL.keys() - {"bench"}  # and is installed, as armlm.<name> (bench/ is not)


def test_no_module_imports_an_armlm_layer_by_a_bare_name():
    bare = [f"{path.relative_to(REPO)}: {module}" for path in python_files() for module in imported_modules(path)
            if module.split(".")[0] in LEVEL.keys() - {"bench"} | {"armlm_cli"}]
    assert not bare, bare
    assert imported_packages(REPO / "train.py") == {"cli"}  # the scan reads what it should


def is_module(dotted: str) -> bool:
    package = owner(dotted)
    if package is None:
        return False
    inside = dotted.split(".")[1:] if package == "bench" else dotted.split(".")[1 if package == "cli" else 2:]
    path = REPO.joinpath(package, *inside)
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def named_module(reference: str) -> str | None:
    """The armlm module a reference names ("armlm.training.run:pretrain" -> armlm.training.run;
    "armlm.objectives.mlm.MaskedLM" -> armlm.objectives.mlm), None where it names none: another library's, or a dotted
    string that is no code (a file name such as "diagnostics.json", a setting such as "finetune.dropout")."""
    if COLON_REFERENCE.match(reference):
        return reference.partition(":")[0]
    parts = reference.split(".")
    return next((".".join(parts[:n]) for n in range(len(parts), 1, -1) if is_module(".".join(parts[:n]))), None)


def layer_of(package: str) -> str:
    return f"{package} (layer {LEVEL[package]}: {', '.join(LAYERS[LEVEL[package]])})"


def check(where: str, reader: str, reference: str) -> list[str]:
    """Why `reference`, read by code of package `reader`, breaks the layers; empty when it does not."""
    package = owner(reference.partition(":")[0])
    if package is None:
        return []  # another library's (lightning.pytorch.Trainer)
    module = named_module(reference)
    if module is None:
        # a "module:attr" or a config's reference always means code, so one that names no module is broken
        return [f"{where}: {reference!r} names no module in the repository"] if ":" in reference else []
    if package != reader and LEVEL[package] >= LEVEL[reader]:
        return [f"{where}: {reference!r} names {layer_of(package)} from {layer_of(reader)}"]
    return []


def config_references(path: Path) -> list[str]:
    """Every `_target_` of a config, at any depth, and a study config's planner and report."""
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            found.extend(str(v) for k, v in node.items() if k == "_target_")
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    walk(document)
    if path.parent.name == "study":
        found.extend(str(document[key]) for key in STUDY_KEYS if document.get(key))
    return found


def config_edges() -> list[tuple[str, str, str]]:
    """(where, reading package, reference) for every code reference in configs/."""
    configs = REPO / "configs"
    edges = []
    for path in sorted(configs.rglob("*.yaml")):
        relative = path.relative_to(configs)
        reader = CONFIG_READERS[relative.parts[0] if len(relative.parts) > 1 else path.stem]
        edges += [(f"configs/{relative}", reader, reference) for reference in config_references(path)]
    return edges


def source_edges() -> list[tuple[str, str, str]]:
    """(where, package, reference) for every string constant in a package's modules that is written as code."""
    edges = []
    for package in LEVEL:
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                        COLON_REFERENCE.match(node.value) or DOTTED_REFERENCE.match(node.value)):
                    edges.append((f"{path.relative_to(REPO)}:{node.lineno}", package, node.value))
    return edges


def test_every_config_names_only_code_its_reader_may_import():
    configs = REPO / "configs"
    entries = {p.stem if p.is_file() else p.name for p in configs.iterdir()
               if p.suffix == ".yaml" or (p.is_dir() and not p.name.startswith("__"))}
    assert entries == CONFIG_READERS.keys(), entries ^ CONFIG_READERS.keys()  # a new config group names its reader
    edges = config_edges()
    # the scan sees every kind of reference (an empty scan would pass for nothing)
    references = {reference for _, _, reference in edges}
    assert {"armlm.objectives.mlm.MaskedLM", "armlm.finetune.metrics.accuracy", "armlm.studies.embeddings_plan:plan",
            "armlm.analysis.reports.blimp_report:write_blimp_report"} <= references
    broken = [problem for edge in edges for problem in check(*edge)]
    assert not broken, "\n".join(broken)


def test_every_string_that_names_code_names_only_layers_below_it():
    edges = source_edges()
    assert any(reference == "armlm.training.run:pretrain" for _, _, reference in edges)  # a registry's, read
    broken = [problem for edge in edges for problem in check(*edge)]
    assert not broken, "\n".join(broken)


def test_a_primary_configs_reader_is_the_package_of_the_command_that_runs_on_it():
    from armlm.commands import COMMANDS

    for cmd in COMMANDS.values():
        if cmd.config is not None:
            assert CONFIG_READERS[cmd.config] == owner(cmd.run.partition(":")[0]), cmd.name


def test_nothing_downstream_of_the_sources_switches_on_a_sources_kind():
    """A source answers for itself (sources.base.ModelSource's methods, sources.armlm.ArmlmSource's): `kind` is a
    label for reports, never a branch."""
    switches = []
    for path in sorted(REPO.glob("*/*.py")):
        if path.parts[-2] in ("sources", "tests", ".venv") or path.parts[-2].startswith("."):
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if re.search(r"\.kind\s*[!=]=\s*[\"'](armlm|huggingface)[\"']", line):
                switches.append(f"{path.relative_to(REPO)}:{number}")
    assert not switches, switches


ANALYSIS_FLOORS = ["tables", "findings", "reports"]  # analysis/'s sub-packages, bottom first


def test_analysis_is_split_by_what_it_holds_and_each_part_imports_only_those_below_it():
    analysis = REPO / "analysis"
    assert sorted(p.name for p in analysis.glob("*.py")) == ["__init__.py"]  # no flat modules beside the parts
    assert sorted(p.name for p in analysis.iterdir() if (p / "__init__.py").is_file()) == sorted(ANALYSIS_FLOORS)
    upward = []
    for floor, part in enumerate(ANALYSIS_FLOORS):
        for path in sorted((analysis / part).glob("*.py")):
            for module in imported_modules(path):
                parts = module.split(".")
                if parts[:2] == ["armlm", "analysis"] and len(parts) > 2 and ANALYSIS_FLOORS.index(parts[2]) > floor:
                    upward.append(f"{path.relative_to(REPO)} imports {module}")
    assert not upward, upward


def test_every_registry_names_code_as_module_colon_function():
    """Commands, reports, benchmarks, study stages and a study's planner and report: one style, so one resolver
    (common.commands.resolve) reads them all; Hydra's `_target_` stays Hydra's."""
    from armlm.analysis.reports.registry import REPORTS
    from armlm.benchmarks import benchmarks
    from armlm.commands import COMMANDS
    from armlm.studies.stages import STAGE_KINDS

    named = [c.run for c in (*COMMANDS.values(), *REPORTS.values(), *benchmarks().values())]
    named += [k.run for k in STAGE_KINDS.values()]
    for path in sorted((REPO / "configs" / "study").glob("*.yaml")):
        study = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        named += [str(study[key]) for key in STUDY_KEYS if study.get(key)]
    assert len(named) > 20 and all(COLON_REFERENCE.match(ref) for ref in named), [
        ref for ref in named if not COLON_REFERENCE.match(ref)]
