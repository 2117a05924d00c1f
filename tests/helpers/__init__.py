"""Helpers that test modules import (fixtures' builders, oracles), kept apart from the tests themselves."""
