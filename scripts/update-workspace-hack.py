#!/usr/bin/env python3
"""The [dependencies] of crates/sy-workspace-hack/Cargo.toml: the third-party crates whose
resolved features differ between `cargo build -p X` and a whole-workspace build, pinned to the
workspace union.

The pins are computed from scratch, in a copy of the workspace whose hack starts empty, and
iterated to a fixpoint (a pin can enable optional dependencies that then differ in turn; a
pinned crate no longer differs, so pins accumulate):

  scripts/update-workspace-hack.py            print the pins
  scripts/update-workspace-hack.py --write    write them into crates/sy-workspace-hack/Cargo.toml
  scripts/update-workspace-hack.py --check    exit 1 (with a diff) when the file's pins are stale:
                                              missing, extra, or with other versions or features

Offline: it reads the registry cache that `cargo fetch` / a build left."""
import collections
import difflib
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
HACK = os.path.join("crates", "sy-workspace-hack", "Cargo.toml")
MARK = "[dependencies]"


def tree(root, args):
    cmd = ["cargo", "tree", "--offline", "-e", "normal,dev", "-f", "{p}|{f}", "--prefix", "none",
           "--target", "x86_64-unknown-linux-gnu"] + args
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=root)
    if out.returncode:
        print(out.stderr, file=sys.stderr)
        sys.exit(2)
    res = {}
    for line in out.stdout.splitlines():
        if "|" not in line:
            continue
        p, f = line.replace(" (*)", "").split("|", 1)
        parts = p.strip().split()
        name, ver = parts[0], parts[1]
        if len(parts) > 2 and parts[2].startswith("("):
            continue  # workspace/path crate
        feats = set(x for x in f.strip().split(",") if x)
        res[(name, ver)] = res.get((name, ver), set()) | feats
    return res


def hack_users(root):
    """Every workspace crate that depends on sy-workspace-hack (sy-selector and sy-wire stay light
    and do not)."""
    out = subprocess.run(["cargo", "metadata", "--offline", "--no-deps", "--format-version", "1"],
                         capture_output=True, text=True, cwd=root)
    if out.returncode:
        print(out.stderr, file=sys.stderr)
        sys.exit(2)
    return sorted(p["name"] for p in json.loads(out.stdout)["packages"]
                  if any(d["name"] == "sy-workspace-hack" for d in p["dependencies"]))


def pins(root):
    """One pass: {(name, version): workspace-union features} of the crates whose features
    differ in some package's own resolution."""
    ws = tree(root, ["--workspace"])
    diff = {}
    for pkg in hack_users(root):
        for extra in ([], ["-e", "normal"]):
            for k, v in tree(root, ["-p", pkg] + extra).items():
                if v != ws.get(k):
                    diff[k] = ws[k]
    return diff


def render(diff):
    """The dependency lines (a crate in several versions gets one key per version)."""
    names = collections.Counter(n for n, _ in diff)
    lines = []
    for (n, v), f in sorted(diff.items()):
        key = n if names[n] == 1 else f"{n}_{v.lstrip('v').replace('.', '_')}"
        feats = ", ".join(f'"{x}"' for x in sorted(f))
        pkg = f'package = "{n}", ' if key != n else ""
        lines.append(f'{key} = {{ {pkg}version = "={v.lstrip("v")}", default-features = false, '
                     f'features = [{feats}] }}')
    return lines


def split(text):
    """(head through the [dependencies] line, dependency lines, the rest)."""
    head, _, rest = text.partition(MARK + "\n")
    deps, tail = [], []
    lines = rest.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith("["):
            tail = lines[i:]
            break
        if line.strip() and not line.lstrip().startswith("#"):
            deps.append(line.rstrip("\n"))
    return head + MARK + "\n", deps, "".join(tail)


def with_deps(text, deps):
    head, _, tail = split(text)
    return head + "".join(d + "\n" for d in deps) + ("\n" + tail if tail else "")


def fixpoint():
    """The pins from an empty hack, iterated until they stop changing (in a scratch copy)."""
    with tempfile.TemporaryDirectory(prefix="sy-hack-") as tmp:
        files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                               check=True).stdout.decode().split("\0")
        for f in files:
            keep = f.endswith(("Cargo.toml", ".rs")) or f in ("Cargo.lock", "rust-toolchain.toml")
            if f and (keep or f.startswith(".cargo/")):
                src = os.path.join(ROOT, f)
                if not os.path.exists(src):
                    continue
                dst = os.path.join(tmp, f)
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                shutil.copy2(src, dst)
        path = os.path.join(tmp, HACK)
        original = open(path).read()
        # A pinned crate no longer differs in the next pass, so pins accumulate (the latest
        # features winning) until a pass finds nothing new.
        current = {}
        for _ in range(6):
            open(path, "w").write(with_deps(original, render(current)))
            merged = {**current, **pins(tmp)}
            if merged == current:
                return render(current)
            current = merged
        print("update-workspace-hack: no fixpoint after 6 passes", file=sys.stderr)
        sys.exit(2)


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode not in ("", "--check", "--write"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    path = os.path.join(ROOT, HACK)
    text = open(path).read()
    want = fixpoint()
    if mode == "--write":
        open(path, "w").write(with_deps(text, want))
        print(f"{HACK}: {len(want)} pins")
    elif mode == "--check":
        have = split(text)[1]
        if have != want:
            sys.stdout.writelines(difflib.unified_diff(
                [h + "\n" for h in have], [w + "\n" for w in want], HACK, "computed"))
            print(f"{HACK}: the pins are stale; run scripts/update-workspace-hack.py --write",
                  file=sys.stderr)
            sys.exit(1)
        print(f"{HACK}: {len(have)} pins, up to date")
    else:
        print("\n".join(want))


if __name__ == "__main__":
    main()
