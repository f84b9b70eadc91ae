"""Re-indent or minify JSON text without parsing its values, so that every literal stays as the
producer wrote it: ``1.10`` stays ``1.10``, ``1e400`` stays ``1e400``, key order stays the
producer's. Edit-and-replay writes back exactly what the operator sees and changed, nothing more.

The input must already be valid JSON (check with ``json.loads`` first); these functions only
move whitespace between tokens.
"""

import re

_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]:,]|[^\s{}\[\]:,"]+', re.S)


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def minify(text: str) -> str:
    return "".join(tokens(text))


def pretty(text: str, indent: int = 2) -> str:
    out: list[str] = []
    depth = 0
    toks = tokens(text)
    for i, tok in enumerate(toks):
        nxt = toks[i + 1] if i + 1 < len(toks) else ""
        if tok in "{[" and len(tok) == 1:
            if nxt in ("}", "]"):          # an empty container stays on one line
                out.append(tok)
                continue
            depth += 1
            out.append(tok + "\n" + " " * indent * depth)
        elif tok in "}]" and len(tok) == 1:
            if out and out[-1] in ("{", "["):
                out.append(tok)
                continue
            depth -= 1
            out.append("\n" + " " * indent * depth + tok)
        elif tok == ",":
            out.append(",\n" + " " * indent * depth)
        elif tok == ":":
            out.append(": ")
        else:
            out.append(tok)
    return "".join(out)
