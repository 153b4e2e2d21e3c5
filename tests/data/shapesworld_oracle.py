"""An independent truth oracle for ShapesWorld captions, used only by tests.

It parses caption *text* (not the generator's meaning vectors) and checks it against the scene graph arrays, so a
bug in the generator's renderer or truth function cannot hide itself.
"""

COLOURS = ["red", "green", "blue", "yellow", "purple", "cyan", "orange", "gray"]
SHAPES = ["circle", "square", "triangle", "diamond", "cross", "star"]
SIZES = ["small", "large"]
ROWS = ["top", "middle", "bottom"]
COLS = ["left", "center", "right"]
RELS = {"to the left of": "left", "to the right of": "right", "above": "above", "below": "below"}


def _parse_np(words, i):
    size = None
    if words[i] in SIZES:
        size = SIZES.index(words[i])
        i += 1
    colour = COLOURS.index(words[i])
    shape = SHAPES.index(words[i + 1])
    return (colour, shape, size), i + 2


def parse(text):
    """-> ('O', np, cell|None) | ('P', np1, np2) | ('R', np1, rel, np2); raises on ungrammatical text."""
    words = text.split()
    i = 0
    if words[:2] == ["there", "is"]:
        i = 2
    if words[i] == "the":
        np1, i = _parse_np(words, i + 1)
        assert words[i] == "is", text
        rest = " ".join(words[i + 1:])
        for phrase, rel in RELS.items():
            if rest.startswith(phrase + " the "):
                np2, j = _parse_np(words, i + 1 + len(phrase.split()) + 1)
                assert j == len(words), text
                return ("R", np1, rel, np2)
        raise ValueError(text)
    assert words[i] in ("a", "an"), text
    np1, i = _parse_np(words, i + 1)
    if i == len(words):
        return ("O", np1, None)
    if words[i:i + 2] == ["in", "the"]:
        assert len(words) == i + 4, text
        return ("O", np1, (ROWS.index(words[i + 2]), COLS.index(words[i + 3])))
    if words[i] == "and":
        assert words[i + 1] in ("a", "an"), text
        np2, j = _parse_np(words, i + 2)
        assert j == len(words), text
        return ("P", np1, np2)
    rest = " ".join(words[i:])
    for phrase, rel in RELS.items():
        if rest.startswith(phrase + " a ") or rest.startswith(phrase + " an "):
            np2, j = _parse_np(words, i + len(phrase.split()) + 1)
            assert j == len(words), text
            return ("R", np1, rel, np2)
    raise ValueError(text)


def articles_ok(text):
    words = text.split()
    for w, nxt in zip(words[:-1], words[1:]):
        if w in ("a", "an") and (w == "an") != (nxt[0] in "aeiou"):
            return False
    return True


def holds(text, objects):
    """objects: list of dicts with colour, shape, size, row, col (ints)."""
    parsed = parse(text)

    def match(np_):
        c, s, z = np_
        return [k for k, o in enumerate(objects)
                if o["colour"] == c and o["shape"] == s and (z is None or o["size"] == z)]

    if parsed[0] == "O":
        _, np1, cell = parsed
        return any(cell is None or (objects[k]["row"], objects[k]["col"]) == cell for k in match(np1))
    if parsed[0] == "P":
        return any(a != b for a in match(parsed[1]) for b in match(parsed[2]))
    _, np1, rel, np2 = parsed
    for a in match(np1):
        for b in match(np2):
            if a == b:
                continue
            oa, ob = objects[a], objects[b]
            ok = {"left": oa["col"] < ob["col"], "right": oa["col"] > ob["col"],
                  "above": oa["row"] < ob["row"], "below": oa["row"] > ob["row"]}[rel]
            if ok:
                return True
    return False


def objects_of(data, i):
    n = int(data["obj_count"][i])
    return [dict(colour=int(data["obj_colour"][i, k]), shape=int(data["obj_shape"][i, k]),
                 size=int(data["obj_size"][i, k]), row=int(data["obj_row"][i, k]), col=int(data["obj_col"][i, k]))
            for k in range(n)]
