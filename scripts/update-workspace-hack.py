#!/usr/bin/env python3
"""Prints the [dependencies] of crates/sy-workspace-hack/Cargo.toml: the third-party crates whose
resolved features differ between `cargo build -p X` and a whole-workspace build, pinned to the
workspace union. Run it, replace the dependency list with its output, and run it again until it
prints nothing new (a fixpoint)."""
import subprocess, collections, re, sys
def tree(args):
    out = subprocess.run(["cargo","tree","--offline","-e","normal,dev","-f","{p}|{f}","--prefix","none","--target","x86_64-unknown-linux-gnu"]+args,capture_output=True,text=True)
    if out.returncode: print(out.stderr, file=sys.stderr); sys.exit(1)
    res = {}
    for line in out.stdout.splitlines():
        if '|' not in line: continue
        line = line.replace(" (*)", "")
        p,f = line.split("|",1)
        p = p.replace(' (*)','').strip()
        parts = p.split()
        name, ver = parts[0], parts[1]
        if len(parts) > 2 and parts[2].startswith('('): continue  # workspace/path crate
        feats = set(x for x in f.strip().split(',') if x)
        res[(name,ver)] = res.get((name,ver), set()) | feats
    return res
ws = tree(["--workspace"])
diff = {}
# every crate that depends on sy-workspace-hack (sy-selector and sy-wire stay light and do not)
for pkg in ["sy-records","sy-fit","sy-margin","sy-select","sy-collect","sy-eval","sy-report","sy-docs","sy-dynamo","sy-sim","sy-cli"]:
    for extra in ([], ["-e","normal"]):
        t = tree(["-p",pkg] + (["-e","normal"] if extra else []))
        for k,v in t.items():
            if v != ws.get(k):
                diff[k] = ws[k]
print(len(ws), len(diff), file=sys.stderr)
names = collections.Counter(n for n,_ in diff)
for (n,v),f in sorted(diff.items()):
    key = n if names[n]==1 else f"{n}_{v.lstrip('v').replace('.','_')}"
    feats = ", ".join(f'"{x}"' for x in sorted(f))
    pkg = f'package = "{n}", ' if key != n else ''
    print(f'{key} = {{ {pkg}version = "={v.lstrip("v")}", default-features = false, features = [{feats}] }}')
