#!/usr/bin/env python3
"""CSV and JSON Lines conformance cases generated from the grammars (issue 23).

  gen.py DIR SEED COUNT

writes into DIR:
  ok.csv, ok.expect.jsonl    CSV following RFC 4180's ABNF (file = [header CRLF] record
                             *(CRLF record) [CRLF]; field = escaped / non-escaped; escaped =
                             DQUOTE *(TEXTDATA / COMMA / CR / LF / 2DQUOTE) DQUOTE), TEXTDATA
                             widened to any UTF-8 but the delimiter, quote and line breaks (as
                             ferry reads it), with empty fields and blank records; the expected
                             values per record as a JSON array ("\\N" stands for NULL: an
                             unquoted empty field);
  ok.jsonl, ok.expect.jsonl2 JSON Lines objects whose values follow RFC 8259's grammar
                             (strings with every escape form, surrogate pairs, U+10FFFF, numbers
                             with fraction and exponent, literals, nested values); the expected
                             text of each value as ferry keeps it: strings unescaped, numbers
                             and nested values as written;
  bad/NN.jsonl, bad/NN.csv   one line violating the grammar each, with NN.where holding the
                             line:column the error must name.
Uses only the standard library; the same SEED gives the same files."""
import json
import os
import random
import sys

out, seed, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(seed)
os.makedirs(os.path.join(out, "bad"), exist_ok=True)

ALPHABET = ["a", "Z", "0", " ", "é", "名", "😀", "\U0010ffff", "\t", "\\", "'", ";"]


def text(n_max=6, extra=()):
    return "".join(rnd.choice(ALPHABET + list(extra)) for _ in range(rnd.randint(0, n_max)))


# ---- CSV (RFC 4180) ---------------------------------------------------------------------
COLS = 3


def csv_field():
    """(bytes as written, expected value); expected None = NULL."""
    kind = rnd.choice(["plain", "plain", "escaped", "escaped_special", "empty", "quoted_empty"])
    if kind == "empty":
        return "", None
    if kind == "quoted_empty":
        return '""', ""
    if kind == "plain":
        v = text()
        v = v.strip() or "v"  # ferry keeps spaces; keep the case simple to read
        return v, v
    v = text(extra=[",", '"', "\r\n", "\n", '""'])
    if kind == "escaped_special":
        v += rnd.choice([",", '"', "\r\n", "\n"])
    return '"' + v.replace('"', '""') + '"', v


def csv_file():
    lines, expect = [], []
    lines.append(",".join("c%d" % i for i in range(1, COLS + 1)))
    for _ in range(count):
        fields = [csv_field() for _ in range(COLS)]
        lines.append(",".join(f[0] for f in fields))
        expect.append([f[1] for f in fields])
    eol = rnd.choice(["\r\n", "\n"])
    body = eol.join(lines) + rnd.choice(["", eol])
    with open(os.path.join(out, "ok.csv"), "w", encoding="utf-8", newline="") as f:
        f.write(body)
    with open(os.path.join(out, "ok.expect.jsonl"), "w", encoding="utf-8") as f:
        for e in expect:
            f.write(json.dumps(["\\N" if v is None else v for v in e], ensure_ascii=False) + "\n")


# ---- JSON (RFC 8259) -------------------------------------------------------------------
def j_string():
    """(JSON text, the value)."""
    parts, value = [], []
    for _ in range(rnd.randint(0, 6)):
        c = rnd.choice(ALPHABET + ['"', "\n", "\u0001", "/", "\u2028"])
        form = rnd.choice(["raw", "short", "u"])
        if c in ('"', "\\") or ord(c) < 0x20:
            form = rnd.choice(["short", "u"])
        short = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n",
                 "\r": "\\r", "\t": "\\t"}
        if form == "short" and c in short:
            parts.append(short[c])
        elif form in ("u", "short"):
            cp = ord(c)
            if cp > 0xFFFF:
                cp -= 0x10000
                parts.append("\\u%04x\\u%04X" % (0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF)))
            else:
                parts.append(rnd.choice(["\\u%04x", "\\u%04X"]) % cp)
        else:
            parts.append(c)
        value.append(c)
    return '"' + "".join(parts) + '"', "".join(value)


def j_number():
    s = rnd.choice(["", "-"])
    s += rnd.choice(["0", str(rnd.randint(1, 9)) + "".join(rnd.choice("0123456789") for _ in range(rnd.randint(0, 25)))])
    if rnd.random() < 0.5:
        s += "." + "".join(rnd.choice("0123456789") for _ in range(rnd.randint(1, 8)))
    if rnd.random() < 0.3:
        s += rnd.choice("eE") + rnd.choice(["", "+", "-"]) + str(rnd.randint(0, 400))
    return s


def j_nested(depth=0):
    if depth > 2 or rnd.random() < 0.3:
        return rnd.choice([j_number(), j_string()[0], "true", "false", "null"])
    if rnd.random() < 0.5:
        items = [j_nested(depth + 1) for _ in range(rnd.randint(0, 3))]
        return "[" + rnd.choice([",", " , ", ",\t"]).join(items) + "]"
    items = [j_string()[0] + rnd.choice([":", " : "]) + j_nested(depth + 1)
             for _ in range(rnd.randint(0, 3))]
    return "{" + ",".join(items) + "}"


def jsonl_file():
    lines, expect = [], []
    for _ in range(count):
        s_text, s_val = j_string()
        n = j_number()
        nest = j_nested(1) if rnd.random() < 0.8 else "[]"
        if nest[0] not in "[{":
            nest = "[" + nest + "]"
        ws = rnd.choice(["", " ", "\t", " \t "])
        members = [('"s"', s_text), ('"n"', n), ('"j"', nest)]
        rnd.shuffle(members)
        lines.append(ws + "{" + ws + ("," + ws).join(k + ws + ":" + ws + v for k, v in members) + ws + "}" + ws)
        expect.append([s_val, n, nest])
    with open(os.path.join(out, "ok.jsonl"), "w", encoding="utf-8", newline="") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, "ok.expect.jsonl2"), "w", encoding="utf-8") as f:
        for e in expect:
            f.write(json.dumps(e, ensure_ascii=False) + "\n")


# Lines that break one rule of RFC 8259, with the 1-based column of the offending character.
BAD_JSON = [
    ('{"a": 01}', 8),             # leading zero
    ('{"a": +1}', 7),             # plus sign
    ('{"a": 1.}', 9),             # digit after the point
    ('{"a": .5}', 7),             # no integer part
    ('{"a": 1e}', 9),             # digit after e
    ('{"a": "x\ty"}', 9),         # raw control character
    ('{"a": "\\x"}', 8),          # bad escape
    ('{"a": "\\ud800"}', 8),      # lone surrogate
    ('{"a": [1,]}', 10),          # trailing comma
    ('{"a": 1,}', 9),             # trailing comma in the object
    ("{'a': 1}", 2),              # single quotes
    ('{"a": tru}', 7),            # literal
    ('{"a": NaN}', 7),            # not JSON
    ('{"a\\u0000b": 1}', 2),      # a key no column can hold
]
BAD_CSV = [
    ('c1,c2\n"a"b,1\n', "2:4"),   # text after a closing quote
    ('c1,c2\na"b,1\n', "2:2"),    # quote inside an unquoted field
    ('c1,c2\n"open,1\n', "2:1"),  # quote never closed
    ('c1,c2\n1,2,3\n', "2:"),     # a field too many
]


def bad_files():
    for i, (line, col) in enumerate(BAD_JSON):
        with open(os.path.join(out, "bad", "%02d.jsonl" % i), "w", encoding="utf-8") as f:
            f.write('{"a": 1}\n' + line + "\n")
        with open(os.path.join(out, "bad", "%02d.where" % i), "w") as f:
            f.write("2:%d\n" % col)
    for i, (body, where) in enumerate(BAD_CSV):
        with open(os.path.join(out, "bad", "c%02d.csv" % i), "w", encoding="utf-8", newline="") as f:
            f.write(body)
        with open(os.path.join(out, "bad", "c%02d.where" % i), "w") as f:
            f.write(where + "\n")


csv_file()
jsonl_file()
bad_files()
