"""A study's registrations held to git: each finding's `registered.commit` (and each superseded entry's) must be a
commit on HEAD's history, made on or before the registration's date, whose copy of the study config already held
the finding with the sides and test registered now. A commit typed by hand, or back-filled later, is otherwise
only a claim that the test came before the data."""

from __future__ import annotations

import datetime
import subprocess
from pathlib import Path
from typing import Any

import yaml

# The keys a registration fixes. The claim's wording is left out: it may be amended later without changing the test.
REGISTERED_KEYS = ("a", "b", "test")


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repo), *args], check=False, capture_output=True, text=True)


def git_history_available(repo: Path) -> str | None:
    """None where `repo` is a git work tree with its full history, else why the registrations cannot be checked."""
    if _git(repo, "rev-parse", "--is-inside-work-tree").stdout.strip() != "true":
        return f"{repo} is not a git checkout"
    if _git(repo, "rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        return f"{repo} is a shallow clone (git fetch --unshallow gives the history the registrations name)"
    return None


def _as_date(value: Any) -> datetime.date | None:
    # yaml.safe_load reads an unquoted 2026-11-27 as a date, a quoted one as a string.
    if isinstance(value, datetime.date):
        return value
    try:
        return datetime.date.fromisoformat(str(value))
    except ValueError:
        return None


def _differences(then: dict[str, Any], now: dict[str, Any], commit: str) -> list[str]:
    """Each registered key (down to a side's or test's own keys) that differs between the commit's finding and now."""
    found = []
    for key in REGISTERED_KEYS:
        old, new = then.get(key), now.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            found += [f"{key}.{k} was {old.get(k)!r} at {commit}, is {new.get(k)!r} now"
                      for k in sorted(set(old) | set(new), key=str) if old.get(k) != new.get(k)]
        elif old != new:
            found.append(f"{key} was {old!r} at {commit}, is {new!r} now")
    return found


class _History:
    """The config as each commit held it, under whichever name it had then (renames followed), read once a commit."""

    def __init__(self, repo: Path, path: str) -> None:
        self.repo, self.path = repo, path
        logged = _git(repo, "log", "--follow", "--name-only", "--format=", "--", path).stdout.split()
        self.names = list(dict.fromkeys([path, *logged]))
        added = _git(repo, "log", "--follow", "--diff-filter=A", "--format=%h %cs", "--", path).stdout.splitlines()
        self.added = f"first added in {added[-1]}" if added else "never committed"
        self.read: dict[str, tuple[str | None, Any]] = {}

    def at(self, commit: str) -> tuple[str | None, Any]:
        """(the name it had at `commit`, its parsed text), or (None, None) where no name of it existed there."""
        if commit not in self.read:
            self.read[commit] = (None, None)
            for name in self.names:
                shown = _git(self.repo, "show", f"{commit}:{name}")
                if shown.returncode == 0:
                    try:
                        self.read[commit] = (name, yaml.safe_load(shown.stdout))
                    except yaml.YAMLError as err:
                        self.read[commit] = (name, err)
                    break
        return self.read[commit]


def _problem(registered: Any, where: str, history: _History, finding_id: str,
             now: dict[str, Any]) -> str | None:
    """What is wrong with one registration (`where` names it in the finding), or None. `now`: the sides and test it
    must have held at its commit."""
    repo, path = history.repo, history.path
    commit = str(registered.get("commit") or "") if isinstance(registered, dict) else ""
    if not commit:
        return f"{where} is missing; give registered: {{date: YYYY-MM-DD, commit: <hash>}}"
    full = _git(repo, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}").stdout.strip()
    if not full:
        return (f"{where} {commit} is no commit of this repository; name the commit that registered it "
                f"(git log -- {path})")
    ancestor = _git(repo, "merge-base", "--is-ancestor", full, "HEAD").returncode
    if ancestor != 0:
        return (f"{where} {commit} is not on HEAD's history (a side branch, or rewritten by a rebase); name the "
                f"commit on this history that registered it (git log -- {path})")
    committed, date = _as_date(_git(repo, "show", "-s", "--format=%cs", full).stdout.strip()), registered.get("date")
    if committed is None or _as_date(date) is None or committed > _as_date(date):
        return (f"{where} {commit} was committed on {committed}, registered.date is {date}: a registration's commit "
                "is made on or before its date; name the commit it was registered at, or correct the date")
    name, text = history.at(full)
    if name is None:
        return (f"{where} {commit}: {path} did not exist there under any of its names {history.names} "
                f"({history.added}); name the commit that added the finding")
    if isinstance(text, yaml.YAMLError):
        return f"{where} {commit}: {name} does not parse there ({str(text).splitlines()[0]}); name another commit"
    held = (text.get("findings") or {}) if isinstance(text, dict) else {}
    then = held.get(finding_id) if isinstance(held, dict) else None
    if not isinstance(then, dict):
        # The ids it did hold show a finding renamed since (its registration then was under another id).
        return (f"{where} {commit}: {name} held no findings.{finding_id} there (its findings: "
                f"{sorted(held) if isinstance(held, dict) else held}); name the commit that added it "
                f"(git log -S {finding_id} -- {path})")
    changed = _differences(then, now, commit)
    if changed:
        return (f"{where} {commit}: {'; '.join(changed)}; a change after registration is a new registration "
                "(superseded: the old one with its why), or name the commit that holds today's sides and test")
    return None


def registration_problems(study: dict[str, Any], config: Path, repo: Path) -> list[str]:
    """One self-contained line per registration of `study` (loaded from `config`, a file in the work tree `repo`)
    that git does not bear out; empty when every one holds."""
    top = Path(_git(repo, "rev-parse", "--show-toplevel").stdout.strip() or repo).resolve()
    try:
        path = config.resolve().relative_to(top).as_posix()
    except ValueError:
        return [f"{config}: not inside the git work tree {top}; its registrations cannot be checked there"]
    history, problems = _History(top, path), []
    for finding_id, finding in (study.get("findings") or {}).items():
        current = {key: finding.get(key) for key in REGISTERED_KEYS}
        entries = [("registered.commit", finding.get("registered"), current)]
        for index, entry in enumerate(finding.get("superseded") or []):
            # A superseded entry records the test it replaced; its sides are today's unless it gives its own.
            then = {key: entry.get(key, current[key]) for key in REGISTERED_KEYS}
            entries.append((f"superseded[{index}].registered.commit", entry.get("registered"), then))
        for where, registered, now in entries:
            problem = _problem(registered, where, history, finding_id, now)
            if problem:
                problems.append(f"{config.name} finding {finding_id}: {problem}")
    return problems
