#!/usr/bin/python3
"""Prints a job spec (protobuf text format): a base spec with overrides.

  spec.py BASE KEY=VALUE...

BASE is a text file of `key: value` lines (nested keys dotted, e.g.
`optimizer.learning_rate: 1e-3`). Each override sets a (dotted) key to a raw
text-format value (quote strings yourself); `KEY=` removes the key; `KEY+=V`
adds one more value of a repeated field. Values are copied as given, so a
case can carry anything the parser must refuse.
"""
import sys


def main():
    fields = []  # (key, value) in order; repeated keys allowed
    with open(sys.argv[1]) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                k, v = line.split(":", 1)
                fields.append((k.strip(), v.strip()))
    for arg in sys.argv[2:]:
        k, v = arg.split("=", 1)
        if k.endswith("+"):
            fields.append((k[:-1], v))
            continue
        fields = [(fk, fv) for fk, fv in fields if fk != k]
        if v != "":
            fields.append((k, v))
    # Group dotted keys into nested messages (one level is all specs need;
    # deeper keys nest recursively).
    def emit(items, indent):
        out = []
        groups = {}
        order = []
        for k, v in items:
            if "." in k:
                head, rest = k.split(".", 1)
                if head not in groups:
                    groups[head] = []
                    order.append(("g", head))
                groups[head].append((rest, v))
            else:
                order.append(("f", (k, v)))
        for kind, x in order:
            if kind == "f":
                out.append(f"{indent}{x[0]}: {x[1]}")
            else:
                out.append(f"{indent}{x} {{")
                out.extend(emit(groups[x], indent + "  "))
                out.append(f"{indent}}}")
        return out

    sys.stdout.write("\n".join(emit(fields, "")) + "\n")


if __name__ == "__main__":
    main()
