"""armlm's Hydra configs, shipped as package data (armlm.configs): Hydra's search path finds them as
pkg://armlm.configs, from a checkout or an installed wheel."""
