"""The dashboard's one door to the engine: outside dashboard/services no module imports
queue_core or redis, or reaches for the engine object."""

import ast
from pathlib import Path

DASHBOARD = Path(__file__).resolve().parents[2] / "dashboard"


def test_only_services_talk_to_the_engine():
    offenders = []
    for path in DASHBOARD.rglob("*.py"):
        rel = path.relative_to(DASHBOARD)
        if rel.parts[0] in ("services", "migrations"):
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            elif isinstance(node, ast.Attribute) and node.attr == "get_queue":
                offenders.append(f"{rel}:{node.lineno} get_queue")
            offenders += [f"{rel}:{node.lineno} {n}" for n in names if n.split(".")[0] in ("queue_core", "redis")]
    assert offenders == []
