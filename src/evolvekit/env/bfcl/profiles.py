"""Environment profiles (AgentEvolver §3.1, Fig. 4) for the BFCL backends.

A profile lists an environment's entities with their attributes and operations; the explorer and the task
synthesizer read it. The shipped YAML files under ``profiles/`` were generated from the tool schemas by
``build_profile`` (``python -m evolvekit.env.bfcl.profiles``) and are meant to be edited by hand.
"""

from __future__ import annotations

import functools
import importlib.resources
from pathlib import Path

import yaml

from evolvekit.env.base import EntityProfile, EnvProfile
from evolvekit.env.bfcl import data

DESCRIPTIONS = {
    "GorillaFileSystem": "A Unix-like file system with directories and text files, navigated from a current directory.",
    "MathAPI": "Stateless mathematical operations on numbers and lists of numbers.",
    "MessageAPI": "A messaging workspace: users, a contact list and an inbox of sent and received messages.",
    "TwitterAPI": "A social network account: tweets, comments, retweets, mentions and followed users.",
    "TicketAPI": "A support ticket system: tickets with title, description, priority and status.",
    "TradingBot": "A stock trading account: market data, watchlist, orders, balance and transaction history.",
    "TravelAPI": "A travel booking service: flights, bookings, credit cards, budgets and insurance.",
    "VehicleControlAPI": "A car: engine, doors, fuel, brakes, climate, lights, navigation and tyre pressure.",
}


def build_profile(class_name: str) -> EnvProfile:
    """Derive a profile from a backend's tool schemas: one entity, its argument names as attributes, tools as ops."""
    docs = data.tool_docs(class_name)
    attributes: list[str] = []
    for d in docs:
        for name in d.get("parameters", {}).get("properties", {}):
            if name not in attributes:
                attributes.append(name)
    operations = [f"{d['name']}: {d.get('description', '').split('Tool description:', 1)[-1].strip()}" for d in docs]
    entity = EntityProfile(
        name=class_name, description=DESCRIPTIONS.get(class_name, ""), attributes=attributes, operations=operations
    )
    return EnvProfile(env_name="bfcl", name=class_name, description=DESCRIPTIONS.get(class_name, ""), entities=[entity])


@functools.lru_cache(maxsize=None)
def load_profile(class_name: str) -> EnvProfile:
    res = importlib.resources.files("evolvekit.env.bfcl") / "profiles" / f"{class_name}.yaml"
    if res.is_file():
        return EnvProfile.model_validate(yaml.safe_load(res.read_text()))
    return build_profile(class_name)


def write_profiles(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for cls in data.BACKEND_CLASSES:
        path = folder / f"{cls}.yaml"
        path.write_text(yaml.safe_dump(build_profile(cls).model_dump(), sort_keys=False, width=120))
        out.append(path)
    return out


if __name__ == "__main__":
    for p in write_profiles(Path(__file__).parent / "profiles"):
        print(p)
