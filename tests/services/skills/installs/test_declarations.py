"""Reference 7.4: which env declarations an install keeps, from requirements.json or the
SKILL.md frontmatter; None means "no usable declaration" (a reinstall keeps its own)."""

from __future__ import annotations

import json

from app.services.skills.installs.plan import Files, declarations

BUNDLE = Files({"SKILL.md": b"---\nname: x\ndescription: d\n---\n",
                "run.py": b"import os\nos.environ['API_TOKEN'], os.environ['REGION']\n"})


def declared(entries) -> list | None:
    return declarations(json.dumps(entries).encode(), BUNDLE)


def test_a_rejected_entry_costs_only_itself_and_names_are_trimmed():
    kept = declared({"env": [{"name": "lower"}, {"name": " API_TOKEN ", "required": True,
                                                 "description": "  the token\n"},
                             {"name": "MADE_UP"}, "junk", {"name": "PATH"}, {"name": "REGION"}]})
    assert kept == [{"name": "API_TOKEN", "required": True, "description": "the token"},
                    {"name": "REGION", "required": False, "description": ""}]


def test_more_than_200_candidates_yield_none():
    filler = [{"name": "REGION"}] * 200
    assert declared([{"name": "API_TOKEN"}, *filler]) is None
    assert [e["name"] for e in declared([{"name": "API_TOKEN"}, *filler[:199]])] == [
        "API_TOKEN", "REGION"]


def test_no_usable_declaration_is_none_and_an_empty_list_declares_nothing():
    assert declarations(None, BUNDLE) is None  # no file and no frontmatter `env`
    assert declarations(b"{not json", BUNDLE) is None
    assert declared({"env": None}) is None and declared({"other": 1}) is None
    assert declared([{"name": "MADE_UP"}, {"name": "PATH"}]) is None  # every entry rejected
    assert declared({"env": []}) == [] and declared([]) == []


def test_the_frontmatter_env_list_is_read_when_there_is_no_file():
    files = Files({"SKILL.md": b"---\nname: x\ndescription: d\nenv:\n  - name: REGION\n---\n"})
    assert declarations(None, files) == [{"name": "REGION", "required": False,
                                          "description": ""}]
