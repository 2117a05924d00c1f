"""What an export config is refused on before the export starts: `armlm export` runs check_config on the composed
config before it imports transformers (seconds), so a missing or malformed setting is one line at once."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from armlm.common.rules import Rule, any_value, check_rules, one_of

FORMATS = ("auto", "native", "remote")
# overwrite=yes was true to Python and wrote over an existing export: a flag that replaces files takes true or false
EXPORT_RULES = (
    Rule("format", (str,), one_of(*FORMATS), f"one of {FORMATS}"),
    Rule("overwrite", (bool,), any_value, "true or false"),
    Rule("milestones", (bool,), any_value, "true or false"),
)


def check_config(cfg: DictConfig) -> None:
    """The flags, the format, and the two settings without a default."""
    check_rules(cfg, EXPORT_RULES)
    for required in ("checkpoint", "out"):  # a `???` raises, and the command names the setting to give (common.cli)
        OmegaConf.select(cfg, required, throw_on_missing=True)
